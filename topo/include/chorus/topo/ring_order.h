// chorus — the order of a ring over endpoints that may sit on different hosts.
//
// A ring's neighbours should be the closest endpoints: ranks of one host consecutive (the ring
// then crosses the network once per host), and within a host GPUs under one switch, then one
// host bridge, one NUMA node, one socket. Depth-first order of the topology tree gives exactly
// that when distances follow the tree; GPU links (a partial NVLink mesh) do not, so the
// depth-first start is improved by 2-opt moves on the sum of link costs around the ring.
//
// The result depends only on its arguments, so every rank computes the same ring.
#pragma once

#include <span>
#include <vector>

#include "chorus/topo/topology.h"

namespace chorus::topo {

struct Endpoint {
  int host = 0;   // index into the hosts
  int node = -1;  // node id on that host (GPU, NIC or NUMA node); -1 when unknown
};

// The class of the path between two endpoints of a job.
LinkClass link_between(std::span<const Topology> hosts, const Endpoint& a, const Endpoint& b);

// A ring over members: a permutation of 0..n-1 that starts with 0. Position i sends to
// position i + 1 (mod n).
std::vector<int> ring_order(std::span<const Endpoint> members, std::span<const Topology> hosts);

// Sum of link_cost around the ring `order` (a permutation of members' indexes).
double ring_cost(std::span<const Endpoint> members, std::span<const int> order,
                 std::span<const Topology> hosts);

}  // namespace chorus::topo
