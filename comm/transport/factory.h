// chorus — which transport connects which peers.
//
// Every rank publishes its host identity (CHORUS_HOST_ID, else hostname + boot id) and its place
// on the host (socket, NUMA node and CPU it is bound to, if it is) through the communicator's
// store; ranks with equal identities share memory. The communicator gets one Transport for all
// its peers and, for the algorithms, the host and place of every rank.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "chorus/store.h"
#include "transport/rank_place.h"
#include "transport/transport.h"

namespace chorus::transport {

struct Wiring {
  std::unique_ptr<Transport> transport;
  // host_of[r]: the host index of rank r, numbered in order of each host's lowest rank (so rank 0
  // is on host 0). Equal indices share memory.
  std::vector<int> host_of;
  int hosts = 1;
  // places[r]: rank r's host index and where on it it is bound (algo::ring_by_locality).
  std::vector<RankPlace> places;
  // The CPUs the ranks of this rank's host (in this communicator) may run on together: the size
  // of the union of their affinity masks (the online CPUs when one of them is not bound).
  int host_cpus = 1;
};

// Where this process is bound: the package, NUMA node and lowest CPU of its CPU affinity mask
// when that is a proper subset of the online CPUs and lies in one package / one node (from
// /sys/devices/system/cpu); -1 for what is not bound or not known. host is left 0.
RankPlace local_place();

// Collective over the `world_size` ranks of one communicator (`store` is scoped to it).
// `segment_prefix` names its shared-memory segments.
Wiring connect(int rank, int world_size, Store& store, const std::string& segment_prefix,
               std::chrono::milliseconds timeout);

}  // namespace chorus::transport
