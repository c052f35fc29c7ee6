// chorus — moving topologies between the ranks of a job.
//
// The topology library (topo/) sits below comm/ and knows no communicator; the two ways of
// gathering every rank's topology need one (or the store it is built on), so they are comm's.
// They are comm's API (chorus::, chorus/topology_exchange.h); the wire form and the grouping by
// host are topo's and come along (chorus/topo/serialize.h).
#pragma once

#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/store.h"
#include "chorus/timeout.h"
#include "chorus/topo/serialize.h"
#include "chorus/topo/topology.h"

namespace chorus {

// Every rank's topology, indexed by rank, through two all_gathers on `comm` (sizes, then the
// padded bytes). Collective: every rank of comm must call it.
std::vector<topo::Topology> all_gather_topologies(Communicator& comm, const topo::Topology& local);

// The same through a store alone (before a Communicator exists): rank r sets "<prefix><r>" and
// reads every other rank's key, waiting up to `timeout` (chorus::Timeout names the missing ones).
std::vector<topo::Topology> exchange_topologies(Store& store, int rank, int world_size,
                                                const topo::Topology& local, Millis timeout,
                                                const std::string& prefix = "topo/");

}  // namespace chorus
