// MeshShape: parsing the --mesh text, and Megatron's numbering of mesh ranks.
#include <gtest/gtest.h>

#include "chorus/error.h"
#include "chorus/parallel/mesh_shape.h"

namespace chorus::parallel {
namespace {

TEST(MeshShape, ParsesAxesAndOrder) {
  const MeshShape m = parse_mesh("dp=2,tp=4,pp=3");
  EXPECT_EQ(m.dp, 2);
  EXPECT_EQ(m.tp, 4);
  EXPECT_EQ(m.pp, 3);
  EXPECT_EQ(m.order_string(), "tp-dp-pp");
  const MeshShape n = parse_mesh("tp=2,order=tp-pp-dp");
  EXPECT_EQ(n.dp, 1);
  EXPECT_EQ(n.pp, 1);
  EXPECT_EQ(n.order_string(), "tp-pp-dp");
  for (const char* bad : {"", "tp=0", "tp=-1", "tp=x", "ep=2", "tp", "tp=2,,dp=2", "order=tp-dp",
                          "order=tp-tp-pp", "order=tp-dp-pp-dp", "tp=65536,dp=65536"})
    EXPECT_THROW(parse_mesh(bad), InvalidArgument) << bad;
}

TEST(MeshShape, ErrorsNameTheBadPart) {
  auto message = [](const char* text) {
    try {
      parse_mesh(text);
    } catch (const InvalidArgument& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_NE(message("ep=2").find("unknown axis 'ep'"), std::string::npos);
  EXPECT_NE(message("tp=x").find("tp must be a positive integer, got 'x'"), std::string::npos);
  EXPECT_NE(message("tp").find("'tp' is not NAME=VALUE"), std::string::npos);
  EXPECT_NE(message("order=tp-dp").find("mesh order 'tp-dp'"), std::string::npos);
}

TEST(MeshShape, DefaultOrderIsMegatrons) {
  const MeshShape m = parse_mesh("dp=3,tp=4,pp=2");
  for (int r = 0; r < m.world_size(); ++r) {
    const MeshCoord c = m.coord_of(r);
    EXPECT_EQ(r, c.tp + m.tp * (c.dp + m.dp * c.pp));
    EXPECT_EQ(m.rank_of(c), r);
  }
  const MeshShape other = parse_mesh("dp=3,tp=4,pp=2,order=pp-dp-tp");
  for (int r = 0; r < other.world_size(); ++r) EXPECT_EQ(other.rank_of(other.coord_of(r)), r);
  EXPECT_EQ(other.coord_of(1).pp, 1);
  EXPECT_THROW(m.coord_of(24), InvalidArgument);
}

}  // namespace
}  // namespace chorus::parallel
