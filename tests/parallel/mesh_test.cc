// DeviceMesh: the groups of every axis hold the ranks the axis order says, bad shapes fail on
// every rank, and a placed mesh follows the topology placement.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "chorus/parallel/mesh.h"
#include "chorus/parallel/mesh_placement.h"
#include "chorus/topo/discover.h"
#include "multiproc.h"

namespace chorus::parallel {
namespace {

using chorus::testing::run_ranks;

// The world ranks of `group`, in group order, as every member sees them.
std::vector<int> members(Communicator& world, Communicator& group) {
  std::vector<int> out(static_cast<size_t>(group.size()));
  const int me = world.rank();
  group.all_gather(&me, out.data(), 1, DataType::kI32);
  return out;
}

void check_groups(Communicator& world, const std::string& text) {
  const MeshShape shape = parse_mesh(text);
  DeviceMesh mesh(world, shape, {.placement = MeshOptions::Placement::kRankOrder});
  EXPECT_EQ(mesh.mesh_rank(), world.rank());
  const MeshCoord c = mesh.coord();
  EXPECT_EQ(shape.rank_of(c), world.rank());
  for (Axis axis : {Axis::kDp, Axis::kTp, Axis::kPp}) {
    Communicator& g = mesh.group(axis);
    ASSERT_EQ(g.size(), shape.size(axis)) << to_string(axis);
    EXPECT_EQ(g.rank(), c[axis]) << to_string(axis);
    // Member i is the rank whose coordinate differs from ours only in `axis`, set to i.
    const std::vector<int> got = members(world, g);
    for (int i = 0; i < g.size(); ++i) {
      MeshCoord k = c;
      k[axis] = i;
      EXPECT_EQ(got[static_cast<size_t>(i)], shape.rank_of(k)) << text << " " << to_string(axis);
    }
  }
  // The model-parallel group: the whole replica (same dp index), tp fastest.
  const std::vector<int> mp = members(world, mesh.mp());
  ASSERT_EQ(static_cast<int>(mp.size()), shape.tp * shape.pp);
  for (int pp = 0; pp < shape.pp; ++pp)
    for (int tp = 0; tp < shape.tp; ++tp)
      EXPECT_EQ(mp[static_cast<size_t>(tp + shape.tp * pp)], shape.rank_of({c.dp, tp, pp}));
  EXPECT_NE(mesh.describe().find("dp " + std::to_string(c.dp)), std::string::npos);
}

TEST(Mesh, GroupsFollowTheAxisOrder) {
  run_ranks(8, [](Communicator& world) {
    check_groups(world, "dp=2,tp=2,pp=2");
    check_groups(world, "dp=2,tp=2,pp=2,order=pp-dp-tp");
    check_groups(world, "dp=4,tp=2");
    check_groups(world, "dp=8");
  });
}

TEST(Mesh, AWorldTheShapeDoesNotDivideFailsOnEveryRank) {
  run_ranks(4, [](Communicator& world) {
    try {
      DeviceMesh mesh(world, parse_mesh("dp=3,tp=2"));
      ADD_FAILURE() << "a 6-rank mesh on 4 ranks was accepted";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("dp=3 x tp=2 x pp=1 = 6 ranks"), std::string::npos) << what;
      EXPECT_NE(what.find("world of 4 ranks"), std::string::npos) << what;
    }
    // The world is still usable: nothing collective was started.
    int one = 1, sum = 0;
    world.all_reduce(&one, &sum, 1, DataType::kI32, ReduceOp::kSum);
    EXPECT_EQ(sum, 4);
  });
}

TEST(Mesh, PlacementFollowsTheTopologyPlacement) {
  // Every rank "discovers" the same two-socket host from a saved topology. With dp=2, pp=2 the
  // placement keeps each pipeline's stages next to each other (layout tp,pp,dp), which rank order
  // (tp-dp-pp) does not: the mesh must give mesh rank m to the world rank (= local rank, one
  // host) of m's slot in place_mesh, and build its groups over that mapping.
  const std::string xml = CHORUS_SOURCE_DIR "/tests/data/topo/cpu_2socket_4numa.xml";
  const MeshShape shape = parse_mesh("dp=2,pp=2");
  const std::vector<topo::Topology> hosts{topo::load_xml(xml)};
  const topo::Placement expect = place_mesh(shape, hosts);
  ASSERT_LT(expect.cost, expect.naive_cost) << "the fixture no longer separates the layouts";
  chorus::testing::RunOptions options;
  options.env["HWLOC_XMLFILE"] = xml;
  run_ranks(
      4,
      [&](Communicator& world) {
        DeviceMesh mesh(world, shape);
        EXPECT_EQ(mesh.layout(), expect.layout);
        for (const topo::RankPlacement& rp : expect.ranks)
          EXPECT_EQ(mesh.mesh_rank_of_world()[static_cast<size_t>(rp.slot.local)], rp.rank);
        EXPECT_EQ(mesh.mesh_rank(), mesh.mesh_rank_of_world()[static_cast<size_t>(world.rank())]);
        // Each group holds the world ranks of the mesh coordinates it should.
        const MeshCoord c = mesh.coord();
        for (Axis axis : {Axis::kDp, Axis::kPp}) {
          const std::vector<int> got = members(world, mesh.group(axis));
          for (int i = 0; i < shape.size(axis); ++i) {
            MeshCoord k = c;
            k[axis] = i;
            EXPECT_EQ(got[static_cast<size_t>(i)], mesh.world_rank_of(k)) << to_string(axis);
          }
        }
      },
      options);
}

TEST(Mesh, RankOrderWhereEverySlotIsAlike) {
  // A CPU host without distinctions (this machine, or any one socket): rank order is kept.
  run_ranks(4, [](Communicator& world) {
    DeviceMesh mesh(world, parse_mesh("dp=2,tp=2"));
    EXPECT_EQ(mesh.mesh_rank(), world.rank());
  });
}

}  // namespace
}  // namespace chorus::parallel
