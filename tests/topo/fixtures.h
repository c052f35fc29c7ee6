// The topology fixtures of tests/data/topo (made by make_fixtures.py there).
#pragma once

#include <string>
#include <vector>

#include "chorus/topo/topology.h"

namespace chorus::topo::testing {

inline const char* const kDgx = "dgx_like.xml";  // 2 sockets, 8 GPUs, 4 switches, 8 NICs
inline const char* const kWorkstation = "workstation_4gpu.xml";  // 1 socket, 4 PCIe GPUs
inline const char* const kCpu1 = "cpu_1socket.xml";              // 1 socket, 8 cores
inline const char* const kCpu2 = "cpu_2socket_4numa.xml";        // 2 sockets x 2 NUMA nodes
inline const std::vector<std::string> kAllFixtures = {kDgx, kWorkstation, kCpu1, kCpu2};

std::string fixture_path(const std::string& name);
// Loaded once per process and cached.
const Topology& fixture(const std::string& name);
// `count` copies of a fixture, named <host>-0, <host>-1, ...
std::vector<Topology> hosts_of(const std::string& name, int count);
// The node id of the node named `name`; fails the test when there is none.
int node_named(const Topology& t, const std::string& name);

}  // namespace chorus::topo::testing
