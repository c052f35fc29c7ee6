// place_mesh: a dp x tp x pp mesh as a topology grid (tp 8 ring, pp 2 chain, dp 1 ring), placed
// on saved topologies (tests/data/topo).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chorus/error.h"
#include "chorus/parallel/mesh_placement.h"
#include "chorus/topo/discover.h"

namespace chorus::parallel {
namespace {

// `count` copies of a saved host, named <host>-0, <host>-1, ...
std::vector<topo::Topology> hosts_of(const std::string& file, int count) {
  std::string path = CHORUS_SOURCE_DIR "/tests/data/topo/";
  path += file;
  const topo::Topology host = topo::load_xml(path);
  std::vector<topo::Topology> out(static_cast<size_t>(count), host);
  for (int i = 0; i < count; ++i) out[static_cast<size_t>(i)].hostname += "-" + std::to_string(i);
  return out;
}

TEST(MeshPlacement, GridFollowsTheShapesOrder) {
  const topo::Grid g = mesh_grid(parse_mesh("dp=2,tp=4,pp=3"));
  ASSERT_EQ(g.axes.size(), 3u);
  EXPECT_EQ(topo::to_string(g), "tp=4,dp=2,pp=3");
  EXPECT_EQ(g.axes[0].weight, 8);
  EXPECT_EQ(g.axes[1].weight, 1);
  EXPECT_EQ(g.axes[2].weight, 2);
  EXPECT_EQ(g.axes[2].pattern, topo::GridAxis::Pattern::kChain);
  // Grid ranks are mesh ranks, in any order.
  for (const char* text : {"dp=2,tp=4,pp=3", "dp=2,tp=4,pp=3,order=pp-dp-tp"}) {
    const MeshShape shape = parse_mesh(text);
    const topo::Grid grid = mesh_grid(shape);
    EXPECT_EQ(topo::to_string(grid).substr(0, 2), std::string(to_string(shape.order[0])));
    for (int r = 0; r < shape.world_size(); ++r) {
      const MeshCoord c = shape.coord_of(r);
      std::vector<int> k;
      for (Axis axis : shape.order) k.push_back(c[axis]);
      EXPECT_EQ(grid.rank_of(k), r) << text;
    }
  }
}

TEST(MeshPlacement, PipelinesStayOnAHostAndDataParallelismSpansHosts) {
  // Megatron's order puts pipeline stages tp*dp ranks apart: with dp=4 the naive layout sends
  // every pipeline across hosts. The placement keeps pipelines on a host and spreads DP instead,
  // in either rank order.
  const std::vector<topo::Topology> hosts = hosts_of("dgx_like.xml", 4);
  for (const char* text : {"dp=4,tp=4,pp=2", "dp=4,tp=4,pp=2,order=pp-dp-tp"}) {
    const MeshShape shape = parse_mesh(text);
    const topo::Placement p = place_mesh(shape, hosts);
    EXPECT_EQ(p.layout, "tp,pp,dp") << text;
    EXPECT_LT(p.cost, p.naive_cost) << text;
    ASSERT_EQ(p.ranks.size(), 32u);
    for (const topo::RankPlacement& r : p.ranks) {
      const MeshCoord c = shape.coord_of(r.rank);
      EXPECT_EQ(r.slot.host, c.dp) << text << " rank " << r.rank;
      EXPECT_EQ(r.slot.local, c.tp + shape.tp * c.pp) << text << " rank " << r.rank;
    }
  }
}

TEST(MeshPlacement, MeshesThatDoNotFitNameTheAxis) {
  try {
    place_mesh(parse_mesh("tp=16"), hosts_of("dgx_like.xml", 2));
    ADD_FAILURE() << "tp=16 placed on hosts of 8 ranks";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(e.message().find("tp=16 is larger than a host"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace chorus::parallel
