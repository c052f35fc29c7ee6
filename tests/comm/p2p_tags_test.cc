// Point-to-point tags and any-source receives over shm (p2p_tag_cases.h), and the refusals.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "chorus/communicator.h"
#include "error_helpers.h"
#include "multiproc.h"
#include "p2p_tag_cases.h"

namespace chorus::testing {
namespace {

class PointToPointTags : public ::testing::TestWithParam<P2pTagCase> {};

TEST_P(PointToPointTags, OverShm) {
  run_ranks(3, GetParam().body, {std::chrono::milliseconds(60000), {{"CHORUS_TRANSPORT", "shm"}}});
}

INSTANTIATE_TEST_SUITE_P(Cases, PointToPointTags, ::testing::ValuesIn(p2p_tag_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(PointToPointTagRefusals, NegativeTagsAndLoneAnySource) {
  run_ranks(2, [](Communicator& comm) {
    int32_t v = 0, w = 0;
    const int other = 1 - comm.rank();
    EXPECT_NE(invalid_message([&] {
                comm.send(&v, 1, DataType::kI32, other, -1);
              }).find("tag -1 is negative"),
              std::string::npos);
    EXPECT_NE(invalid_message([&] {
                (void)comm.recv(&v, 1, DataType::kI32, kAnySource, -3);
              }).find("tag -3 is negative"),
              std::string::npos);
    EXPECT_NE(invalid_message([&] {
                comm.send_recv(&v, 1, other, &w, 1, other, DataType::kI32, 0, -2);
              }).find("recv_tag -2"),
              std::string::npos);
    // A receive from self of a tag nothing was sent with is refused at once.
    comm.send(&v, 1, DataType::kI32, comm.rank(), 1);
    EXPECT_NE(invalid_message([&] {
                (void)comm.recv(&v, 1, DataType::kI32, comm.rank(), 2);
              }).find("tag 2"),
              std::string::npos);
    (void)comm.recv(&v, 1, DataType::kI32, comm.rank(), 1);
    // The communicator is still usable.
    int32_t one = 1;
    comm.all_reduce(&one, &one, 1, DataType::kI32, ReduceOp::kSum);
    EXPECT_EQ(one, 2);
    // A group of one rank has no other rank to receive from.
    std::optional<Communicator> alone = comm.split(comm.rank(), 0);
    ASSERT_TRUE(alone.has_value());
    EXPECT_NE(invalid_message([&] {
                (void)alone->recv(&v, 1, DataType::kI32, kAnySource);
              }).find("kAnySource"),
              std::string::npos);
  });
}

}  // namespace
}  // namespace chorus::testing
