// chorus — a topology's wire form, and the ranks of a job grouped by host.
//
// Every rank discovers its own host and the job needs all of them (placement, ring order). A
// topology travels in a compact, versioned binary form (a few KiB for an 8-GPU host, against
// hundreds for hwloc's XML). Moving it between ranks needs a communicator or the bootstrap store
// and is comm's: chorus/topology_exchange.h (all_gather_topologies, exchange_topologies).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/topo/topology.h"

namespace chorus::topo {

std::string serialize(const Topology& topology);
// Throws chorus::InvalidArgument when the bytes are truncated, of another format version, or
// describe an invalid topology.
Topology deserialize(std::string_view bytes);

// Ranks grouped by host: ranks whose topologies name the same host share one entry of `hosts`.
struct JobHosts {
  std::vector<Topology> hosts;    // in order of each host's lowest rank
  std::vector<int> host_of_rank;  // index into hosts
  std::vector<int> local_rank;    // position of the rank among its host's ranks
};
JobHosts group_by_host(std::span<const Topology> per_rank);

}  // namespace chorus::topo
