#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "algo/patterns.h"
#include "chorus/error.h"
#include "chorus/topo/placement.h"
#include "chorus/topo/ring_order.h"
#include "fixtures.h"

namespace chorus::topo {
namespace {

using namespace testing;

double brute_force_best(std::span<const Endpoint> members, std::span<const Topology> hosts) {
  std::vector<int> perm(members.size());
  std::iota(perm.begin(), perm.end(), 0);
  double best = 1e300;
  do best = std::min(best, ring_cost(members, perm, hosts));
  while (std::next_permutation(perm.begin() + 1, perm.end()));
  return best;
}

void expect_permutation_from_zero(const std::vector<int>& order, size_t n) {
  ASSERT_EQ(order.size(), n);
  EXPECT_EQ(order[0], 0);
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(sorted[i], static_cast<int>(i));
}

TEST(RingOrder, OptimalWithinOneHost) {
  Topology pcie_dgx = fixture(kDgx);
  pcie_dgx.gpu_links.clear();  // the same host without NVLink: PCIe distances decide
  for (const Topology* t :
       {&fixture(kWorkstation), static_cast<const Topology*>(&pcie_dgx), &fixture(kCpu2)}) {
    std::vector<int> nodes = t->gpus().empty() ? t->numa_nodes() : t->gpus();
    std::reverse(nodes.begin(), nodes.end());
    std::rotate(nodes.begin(), nodes.begin() + 1, nodes.end());  // a scrambled start
    std::vector<Endpoint> members;
    for (int n : nodes) members.push_back({0, n});
    const std::vector<Topology> hosts = {*t};
    const std::vector<int> order = ring_order(members, hosts);
    expect_permutation_from_zero(order, members.size());
    EXPECT_DOUBLE_EQ(ring_cost(members, order, hosts), brute_force_best(members, hosts))
        << t->hostname;
  }
}

TEST(RingOrder, ClosestDevicesAreNeighbours) {
  Topology t = fixture(kDgx);
  t.gpu_links.clear();
  std::vector<Endpoint> members;
  for (int g : {5, 0, 3, 6, 1, 7, 2, 4})
    members.push_back({0, node_named(t, "GPU" + std::to_string(g))});
  const std::vector<Topology> hosts = {t};
  const std::vector<int> order = ring_order(members, hosts);
  // Two GPUs behind one switch are always ring neighbours.
  size_t switch_neighbours = 0;
  for (size_t i = 0; i < order.size(); ++i)
    switch_neighbours += t.link(members[static_cast<size_t>(order[i])].node,
                                members[static_cast<size_t>(order[(i + 1) % order.size()])].node) ==
                         LinkClass::kPciSwitch;
  EXPECT_EQ(switch_neighbours, 4u);
}

TEST(RingOrder, CrossesTheNetworkOncePerHost) {
  const std::vector<Topology> hosts = hosts_of(kDgx, 4);
  std::vector<Endpoint> members;
  for (int r = 0; r < 32; ++r)  // ranks dealt round-robin over the hosts
    members.push_back({r % 4, hosts[0].gpus()[static_cast<size_t>(r / 4)]});
  const std::vector<int> order = ring_order(members, hosts);
  expect_permutation_from_zero(order, members.size());
  int network_edges = 0;
  for (size_t i = 0; i < order.size(); ++i)
    network_edges += link_between(hosts, members[static_cast<size_t>(order[i])],
                                  members[static_cast<size_t>(order[(i + 1) % order.size()])]) ==
                     LinkClass::kNetwork;
  EXPECT_EQ(network_edges, 4);
  EXPECT_EQ(ring_order(members, hosts), order) << "deterministic";
}

TEST(RingOrder, FollowsAPartialGpuLinkMesh) {
  // Four GPUs on one host bridge, linked 0-2, 2-1, 1-3, 3-0: the ring must use only GPU links.
  Topology t = fixture(kWorkstation);
  const int g[4] = {node_named(t, "GPU0"), node_named(t, "GPU1"), node_named(t, "GPU2"),
                    node_named(t, "GPU3")};
  for (auto [a, b] : {std::pair{0, 2}, {2, 1}, {1, 3}, {3, 0}})
    t.gpu_links.push_back({std::min(g[a], g[b]), std::max(g[a], g[b]), 50});
  std::vector<Endpoint> members;
  for (int n : g) members.push_back({0, n});
  const std::vector<Topology> hosts = {t};
  const std::vector<int> order = ring_order(members, hosts);
  EXPECT_DOUBLE_EQ(ring_cost(members, order, hosts), 4 * link_cost(LinkClass::kGpuLink));
  EXPECT_EQ(order, (std::vector<int>{0, 2, 1, 3}));
}

TEST(RingOrder, SmallAndInvalidInputs) {
  const std::vector<Topology> hosts = {fixture(kCpu1)};
  EXPECT_TRUE(ring_order({}, hosts).empty());
  const std::vector<Endpoint> one = {{0, 1}};
  EXPECT_EQ(ring_order(one, hosts), std::vector<int>{0});
  const std::vector<Endpoint> bad = {{1, 0}};
  EXPECT_THROW(ring_order(bad, hosts), InvalidArgument);
}

// The communicator computes its ring without hwloc, from what each rank knows of itself (host,
// socket, NUMA node, first bound CPU: algo::ring_by_locality). On CPU hosts it must be as good
// as the topology's ring: ranks scattered over every slot of 1, 2 and 4 hosts, cyclically.
TEST(RingOrder, CommunicatorRingMatchesTheTopologyRingOnCpuHosts) {
  for (const char* name : {kCpu1, kCpu2})
    for (int nhosts : {1, 2, 4}) {
      const std::vector<Topology> hosts = hosts_of(name, nhosts);
      const int per_host = 8;
      std::vector<std::vector<Slot>> slots;
      for (int h = 0; h < nhosts; ++h) slots.push_back(host_slots(hosts[h], h, per_host));
      std::vector<Endpoint> members;
      std::vector<algo::RankPlace> places;
      for (int i = 0; i < per_host; ++i)
        for (int h = 0; h < nhosts; ++h) {  // rank r on host r % nhosts, slots scrambled
          const Slot& slot = slots[h][(i * 3 + h) % per_host];
          const Topology& t = hosts[h];
          const int package = t.ancestor(slot.node, NodeKind::kPackage);
          ASSERT_FALSE(slot.pus.empty());
          members.push_back({h, slot.node});
          places.push_back({h, package < 0 ? -1 : t.nodes[package].os_index,
                            t.nodes[slot.node].os_index,
                            *std::min_element(slot.pus.begin(), slot.pus.end())});
        }
      const std::vector<int> by_locality = algo::ring_by_locality(places);
      const std::vector<int> by_topology = ring_order(members, hosts);
      expect_permutation_from_zero(by_locality, members.size());
      EXPECT_DOUBLE_EQ(ring_cost(members, by_locality, hosts),
                       ring_cost(members, by_topology, hosts))
          << name << " x " << nhosts;
      std::vector<int> rank_order(members.size());
      std::iota(rank_order.begin(), rank_order.end(), 0);
      if (nhosts > 1) {
        EXPECT_LT(ring_cost(members, by_locality, hosts), ring_cost(members, rank_order, hosts))
            << name << " x " << nhosts;
      }
    }
}

}  // namespace
}  // namespace chorus::topo
