// chorus — which transport connects which peers.
//
// Every rank publishes its host identity (CHORUS_HOST_ID, else hostname + boot id) through the
// communicator's store; ranks with equal identities share memory. The communicator gets one
// Transport for all its peers and, for the algorithms, the host of every rank.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "chorus/store.h"
#include "transport/transport.h"

namespace chorus::transport {

struct Wiring {
  std::unique_ptr<Transport> transport;
  // host_of[r]: the host index of rank r, numbered in order of each host's lowest rank (so rank 0
  // is on host 0). Equal indices share memory.
  std::vector<int> host_of;
  int hosts = 1;
};

// Collective over the `world_size` ranks of one communicator (`store` is scoped to it).
// `segment_prefix` names its shared-memory segments.
Wiring connect(int rank, int world_size, Store& store, const std::string& segment_prefix,
               std::chrono::milliseconds timeout);

}  // namespace chorus::transport
