// chorus — moving topologies between the ranks of a job.
//
// Every rank discovers its own host and the job needs all of them (placement, ring order). A
// topology travels in a compact, versioned binary form (a few KiB for an 8-GPU host, against
// hundreds for hwloc's XML), through the bootstrap store or an all_gather.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/store.h"
#include "chorus/topo/topology.h"

namespace chorus::topo {

std::string serialize(const Topology& topology);
// Throws chorus::InvalidArgument when the bytes are truncated, of another format version, or
// describe an invalid topology.
Topology deserialize(std::string_view bytes);

// Every rank's topology, indexed by rank, through two all_gathers on `comm` (sizes, then the
// padded bytes). Collective: every rank of comm must call it.
std::vector<Topology> all_gather_topologies(Communicator& comm, const Topology& local);

// The same through a store alone (before a Communicator exists): rank r sets "<prefix><r>" and
// reads every other rank's key, waiting up to `timeout` (chorus::Timeout names the missing ones).
std::vector<Topology> exchange_topologies(Store& store, int rank, int world_size,
                                          const Topology& local, Millis timeout,
                                          const std::string& prefix = "topo/");

// Ranks grouped by host: ranks whose topologies name the same host share one entry of `hosts`.
struct JobHosts {
  std::vector<Topology> hosts;    // in order of each host's lowest rank
  std::vector<int> host_of_rank;  // index into hosts
  std::vector<int> local_rank;    // position of the rank among its host's ranks
};
JobHosts group_by_host(std::span<const Topology> per_rank);

}  // namespace chorus::topo
