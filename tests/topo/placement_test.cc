#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "chorus/error.h"
#include "chorus/topo/placement.h"
#include "fixtures.h"

namespace chorus::topo {
namespace {

using namespace testing;

// A training mesh dp x tp x pp as a grid, the way parallel/ makes one (parallel::mesh_grid):
// Megatron's rank order, tp fastest, then dp, then pp; weights tp 8, pp 2, dp 1. Topology tests
// spell it out so that they need nothing above topo/.
constexpr size_t kTp = 0, kDp = 1, kPp = 2;  // axis indexes into the grid and its coordinates

Grid mesh(int dp, int tp, int pp) {
  return {{{"tp", tp, 8, GridAxis::Pattern::kRing},
           {"dp", dp, 1, GridAxis::Pattern::kRing},
           {"pp", pp, 2, GridAxis::Pattern::kChain}}};
}

TEST(Grid, NumbersRanksFastestAxisFirst) {
  const Grid g = mesh(3, 4, 2);
  EXPECT_EQ(g.world_size(), 24);
  EXPECT_EQ(to_string(g), "tp=4,dp=3,pp=2");
  for (int r = 0; r < g.world_size(); ++r) {
    const std::vector<int> c = g.coord_of(r);
    ASSERT_EQ(c.size(), 3u);
    EXPECT_EQ(r, c[kTp] + 4 * (c[kDp] + 3 * c[kPp]));
    EXPECT_EQ(g.rank_of(c), r);
  }
  EXPECT_THROW(g.coord_of(24), InvalidArgument);
  EXPECT_THROW(g.rank_of(std::vector<int>{0, 3, 0}), InvalidArgument);
  EXPECT_THROW(g.rank_of(std::vector<int>{0, 0}), InvalidArgument);
}

TEST(Placement, InvalidMeshesGetClearErrors) {
  const std::vector<Topology> two = hosts_of(kDgx, 2);
  auto message = [&](const Grid& grid, std::span<const Topology> hosts) {
    try {
      place(grid, hosts);
    } catch (const InvalidArgument& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_NE(message(mesh(3, 3, 1), two).find("not a multiple of the 2 hosts"), std::string::npos);
  EXPECT_NE(message(mesh(1, 16, 1), two).find("tp=16 is larger than a host"), std::string::npos);
  EXPECT_NE(message(mesh(4, 8, 1), two).find("has 8 GPUs for 16 ranks"), std::string::npos);
  EXPECT_NE(message(mesh(1, 2, 1), {}).find("at least one host"), std::string::npos);
  // The innermost axis is the heaviest, whatever its name and place in the grid.
  const Grid heavy_last = {{{"dp", 1, 1}, {"ep", 16, 4}}};
  EXPECT_NE(message(heavy_last, two).find("ep=16 is larger than a host"), std::string::npos);
  // Grids that are not grids.
  EXPECT_NE(message(Grid{}, two).find("1 to 8 axes"), std::string::npos);
  EXPECT_NE(message({{{"a", 2}, {"a", 2}}}, two).find("two axes named a"), std::string::npos);
  EXPECT_NE(message({{{"a", 0}}}, two).find("at least one rank"), std::string::npos);
  EXPECT_NE(message({{{"", 2}}}, two).find("needs a name"), std::string::npos);
}

struct Case {
  std::string fixture;
  int hosts;
  int dp, tp, pp;
};

std::string case_name(const Case& c) {
  return c.fixture + " x" + std::to_string(c.hosts) + " dp=" + std::to_string(c.dp) +
         ",tp=" + std::to_string(c.tp) + ",pp=" + std::to_string(c.pp);
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

class PlacementOnFixtures : public ::testing::TestWithParam<Case> {};

TEST_P(PlacementOnFixtures, KeepsTheRules) {
  const Case& c = GetParam();
  const std::vector<Topology> hosts = hosts_of(c.fixture, c.hosts);
  const Grid grid = mesh(c.dp, c.tp, c.pp);
  const Placement p = place(grid, hosts);
  const int per_host = grid.world_size() / c.hosts;
  ASSERT_EQ(p.ranks.size(), static_cast<size_t>(grid.world_size()));

  // Every slot is taken exactly once.
  std::set<std::pair<int, int>> taken;
  for (const RankPlacement& r : p.ranks) {
    EXPECT_EQ(r.rank, grid.rank_of(r.coord));
    EXPECT_TRUE(taken.insert({r.slot.host, r.slot.local}).second) << "slot used twice";
    EXPECT_FALSE(r.slot.pus.empty());
  }

  // TP groups never cross a host; nor a socket when they fit in one.
  const Topology& host = hosts[0];
  const size_t gpus_per_socket =
      host.gpus().empty() ? 0 : host.gpus().size() / host.packages().size();
  const bool fits_socket = gpus_per_socket > 0 &&
                           gpus_per_socket % static_cast<size_t>(c.tp) == 0 &&
                           static_cast<size_t>(per_host) == host.gpus().size();
  for (const RankPlacement& r : p.ranks) {
    if (r.coord[kTp] != 0) continue;
    std::set<int> hosts_used, sockets_used;
    for (int t = 0; t < c.tp; ++t) {
      std::vector<int> m = r.coord;
      m[kTp] = t;
      const Slot& s = p.ranks[static_cast<size_t>(grid.rank_of(m))].slot;
      hosts_used.insert(s.host);
      sockets_used.insert(hosts[static_cast<size_t>(s.host)].ancestor(s.node, NodeKind::kPackage));
    }
    EXPECT_EQ(hosts_used.size(), 1u) << "a TP group crosses hosts";
    if (fits_socket) {
      EXPECT_EQ(sockets_used.size(), 1u) << "a TP group crosses sockets";
    }
  }

  // PP neighbours share a host when a pipeline of TP groups fits in one.
  if (c.tp * c.pp <= per_host && per_host % (c.tp * c.pp) == 0)
    for (const RankPlacement& r : p.ranks)
      if (r.coord[kPp] + 1 < c.pp) {
        std::vector<int> next = r.coord;
        ++next[kPp];
        EXPECT_EQ(p.ranks[static_cast<size_t>(grid.rank_of(next))].slot.host, r.slot.host)
            << "PP neighbours of rank " << r.rank << " on different hosts";
      }

  // DP spans hosts when each host holds one whole pipeline of TP groups.
  if (c.hosts > 1 && c.tp * c.pp == per_host)
    for (const RankPlacement& r : p.ranks)
      if (r.coord[kDp] == 0) {
        std::set<int> used;
        for (int d = 0; d < c.dp; ++d) {
          std::vector<int> m = r.coord;
          m[kDp] = d;
          used.insert(p.ranks[static_cast<size_t>(grid.rank_of(m))].slot.host);
        }
        EXPECT_EQ(used.size(), static_cast<size_t>(c.dp)) << "a DP group stays on one host";
      }

  // Never worse than the topology-unaware order, by the cost model.
  const Placement naive = naive_placement(grid, hosts);
  EXPECT_LE(p.cost, naive.cost + 1e-9);
  EXPECT_DOUBLE_EQ(p.naive_cost, naive.cost);
}

INSTANTIATE_TEST_SUITE_P(
    All, PlacementOnFixtures,
    ::testing::Values(Case{kDgx, 1, 1, 8, 1}, Case{kDgx, 1, 2, 4, 1}, Case{kDgx, 1, 1, 2, 4},
                      Case{kDgx, 2, 2, 8, 1}, Case{kDgx, 2, 2, 2, 4}, Case{kDgx, 2, 4, 2, 2},
                      Case{kDgx, 2, 2, 4, 2}, Case{kDgx, 2, 1, 4, 4}, Case{kDgx, 4, 4, 4, 2},
                      Case{kDgx, 4, 4, 8, 1}, Case{kDgx, 4, 2, 2, 8}, Case{kDgx, 4, 8, 2, 2},
                      Case{kDgx, 2, 1, 8, 2}, Case{kWorkstation, 1, 2, 2, 1},
                      Case{kWorkstation, 1, 1, 2, 2}, Case{kWorkstation, 2, 2, 4, 1},
                      Case{kWorkstation, 2, 2, 2, 2}, Case{kCpu1, 1, 2, 2, 2},
                      Case{kCpu1, 2, 2, 4, 1}, Case{kCpu1, 1, 4, 1, 1}, Case{kCpu2, 1, 2, 2, 1},
                      Case{kCpu2, 2, 2, 4, 1}, Case{kCpu2, 2, 4, 2, 2}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string name = case_name(info.param);
      for (char& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return name;
    });

TEST(Placement, BeatsTheNaiveOrderOnFourDgxHosts) {
  // Megatron's order puts pipeline stages tp*dp ranks apart: with dp=4 the naive layout sends
  // every pipeline across hosts. chorus keeps pipelines on a host and spreads DP instead.
  const std::vector<Topology> hosts = hosts_of(kDgx, 4);
  const Placement p = place(mesh(4, 4, 2), hosts);
  EXPECT_LT(p.cost, p.naive_cost);
  EXPECT_EQ(p.layout, "tp,pp,dp");
  // With dp=2 on 2 hosts either layout crosses the network once per pipeline or DP group; on a
  // tie the pipeline stays on a host.
  const Placement q = place(mesh(2, 2, 4), hosts_of(kDgx, 2));
  EXPECT_LE(q.cost, q.naive_cost);
  EXPECT_EQ(q.layout, "tp,pp,dp");
}

TEST(Placement, TheHeaviestAxisGoesInnermostWhereverItIsListed) {
  // The mesh of BeatsTheNaiveOrder listed slowest first: the same layout and cost, and every
  // coordinate on the same slot. Only the rank numbering (and so the naive layout) differs.
  const std::vector<Topology> hosts = hosts_of(kDgx, 4);
  const Grid megatron = mesh(4, 4, 2);
  const Grid reversed = {{megatron.axes[kPp], megatron.axes[kDp], megatron.axes[kTp]}};
  const Placement a = place(megatron, hosts);
  const Placement b = place(reversed, hosts);
  EXPECT_EQ(b.layout, "tp,pp,dp");
  EXPECT_DOUBLE_EQ(b.cost, a.cost);
  for (const RankPlacement& r : a.ranks) {
    const std::vector<int> c = {r.coord[kPp], r.coord[kDp], r.coord[kTp]};
    const Slot& s = b.ranks[static_cast<size_t>(reversed.rank_of(c))].slot;
    EXPECT_EQ(s.host, r.slot.host) << "rank " << r.rank;
    EXPECT_EQ(s.local, r.slot.local) << "rank " << r.rank;
  }
}

TEST(Placement, NestsAnyNumberOfAxesByTheirTraffic) {
  // A fourth axis (expert parallelism, say) heavier than pp: on two DGX hosts the three heavy
  // axes fill a host and the lightest spans the hosts, heaviest innermost.
  using enum GridAxis::Pattern;
  const Grid grid = {
      {{"tp", 2, 8, kRing}, {"dp", 2, 1, kRing}, {"pp", 2, 2, kChain}, {"ep", 2, 4, kRing}}};
  const Placement p = place(grid, hosts_of(kDgx, 2));
  EXPECT_EQ(p.layout, "tp,ep,pp,dp");
  EXPECT_LT(p.cost, p.naive_cost);
  for (const RankPlacement& r : p.ranks) {
    EXPECT_EQ(r.coord.size(), 4u);
    EXPECT_EQ(r.slot.host, r.coord[1]) << "dp spans the hosts";
  }
}

TEST(Placement, MatchesExhaustiveSearchOnTheWorkstation) {
  // 4 slots: every assignment of 4 mesh ranks is one of 24 permutations.
  const std::vector<Topology> hosts = {fixture(kWorkstation)};
  for (const Grid& grid : {mesh(2, 2, 1), mesh(1, 2, 2), mesh(2, 1, 2)}) {
    std::vector<Slot> slots = host_slots(hosts[0], 0, 4);
    std::vector<int> perm(4);
    std::iota(perm.begin(), perm.end(), 0);
    double best = 1e300;
    do {
      std::vector<Slot> assigned;
      for (int i : perm) assigned.push_back(slots[static_cast<size_t>(i)]);
      best = std::min(best, placement_cost(grid, hosts, assigned));
    } while (std::next_permutation(perm.begin(), perm.end()));
    EXPECT_DOUBLE_EQ(place(grid, hosts).cost, best) << to_string(grid);
  }
}

TEST(Slots, GpuSlotsShareTheirGpusLocalCores) {
  const Topology& t = fixture(kDgx);
  const std::vector<Slot> slots = host_slots(t, 0, 8);
  std::set<int> seen;
  for (const Slot& s : slots) {
    EXPECT_GE(s.gpu, 0);
    const std::vector<int> local = parse_cpu_list(t.nodes[static_cast<size_t>(s.node)].cpus);
    ASSERT_FALSE(s.pus.empty());
    for (int pu : s.pus) {
      EXPECT_NE(std::find(local.begin(), local.end(), pu), local.end())
          << "PU " << pu << " not near GPU" << s.gpu;
      EXPECT_TRUE(seen.insert(pu).second) << "PU " << pu << " given twice";
    }
    EXPECT_EQ(t.link(s.node, s.nic), LinkClass::kPciSwitch)
        << "the NIC behind the GPU's own switch";
  }
}

TEST(Slots, CpuSlotsSpreadOverNumaNodes) {
  const Topology& t = fixture(kCpu2);
  const std::vector<Slot> slots = host_slots(t, 0, 4);
  std::set<int> numa;
  for (const Slot& s : slots) {
    EXPECT_EQ(s.gpu, -1);
    EXPECT_EQ(s.pus.size(), 8u);
    numa.insert(s.node);
  }
  EXPECT_EQ(numa.size(), 4u);
  // More ranks than cores: cores are shared, every rank still gets one.
  for (const Slot& s : host_slots(t, 0, 40)) EXPECT_EQ(s.pus.size(), 2u);
}

}  // namespace
}  // namespace chorus::topo
