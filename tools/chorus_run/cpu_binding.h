// chorus-run — which CPUs each local rank is bound to (--bind), from this host's topology.
#pragma once

#include <string_view>
#include <vector>

namespace chorus::run {

// For each of `nproc` local ranks, the PUs (OS indexes) to bind it to; empty lists for "none".
// Discovers the host with hwloc (chorus_topo) unless the policy is "none". Throws
// chorus::InvalidArgument for an unknown policy.
std::vector<std::vector<int>> local_cpu_binding(std::string_view policy, int nproc);

}  // namespace chorus::run
