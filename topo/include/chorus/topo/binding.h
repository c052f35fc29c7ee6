// chorus — binding a host's local ranks to CPUs (chorus-run --bind).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "chorus/topo/topology.h"

namespace chorus::topo {

enum class BindPolicy : uint8_t {
  kNone,   // leave the scheduler free
  kCores,  // the cores near the rank's device: a fair share of its GPU's local cores, or of
           // the host's cores for CPU ranks (host_slots in placement.h)
  kNuma,   // the whole NUMA node, ranks spread round-robin over the NUMA nodes
};

std::optional<BindPolicy> parse_bind_policy(std::string_view text);

// For each of `local_world_size` ranks on this host, the PUs (OS indexes) it is bound to;
// empty lists for kNone.
std::vector<std::vector<int>> local_rank_cpus(const Topology& host, int local_world_size,
                                              BindPolicy policy);

}  // namespace chorus::topo
