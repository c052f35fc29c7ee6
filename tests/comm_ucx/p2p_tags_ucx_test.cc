// Point-to-point tags and any-source receives over UCX (p2p_tag_cases.h): the UCX link's header
// peek and the set-aside path, on one machine with the transport forced.
#include <gtest/gtest.h>

#include "multiproc.h"
#include "p2p_tag_cases.h"

namespace chorus::testing {
namespace {

class PointToPointTagsUcx : public ::testing::TestWithParam<P2pTagCase> {};

TEST_P(PointToPointTagsUcx, OverUcx) {
  run_ranks(3, GetParam().body, {std::chrono::milliseconds(60000), {{"CHORUS_TRANSPORT", "ucx"}}});
}

INSTANTIATE_TEST_SUITE_P(Cases, PointToPointTagsUcx, ::testing::ValuesIn(p2p_tag_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace chorus::testing
