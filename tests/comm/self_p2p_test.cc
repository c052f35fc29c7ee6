// Point-to-point with oneself: send + recv to self, send_recv with self (both halves and one), the
// async forms, ordering after queued operations, the refusals, and a one-rank group from split.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "error_helpers.h"
#include "multiproc.h"

namespace chorus::testing {
namespace {

constexpr auto kI32 = DataType::kI32;

std::vector<int32_t> iota_from(int32_t first, size_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(SelfPointToPoint, SendThenRecvToSelfOnEveryRank) {
  run_ranks(2, [](Communicator& comm) {
    const int me = comm.rank();
    const auto a = iota_from(100 * me, 1000), b = iota_from(-7, 3);
    std::vector<int32_t> ra(a.size()), rb(b.size());
    comm.send(a.data(), a.size(), kI32, me);
    comm.send(b.data(), b.size(), kI32, me);  // two queued: received in the order sent
    comm.recv(ra.data(), ra.size(), kI32, me);
    comm.recv(rb.data(), rb.size(), kI32, me);
    EXPECT_EQ(ra, a);
    EXPECT_EQ(rb, b);
    // Zero elements pair too.
    comm.send(nullptr, 0, kI32, me);
    comm.recv(nullptr, 0, kI32, me);
    // The communicator still talks to the peer afterwards.
    int32_t v = me + 1;
    comm.all_reduce(&v, &v, 1, kI32, ReduceOp::kSum);
    EXPECT_EQ(v, 3);
  });
}

TEST(SelfPointToPoint, SendRecvWithSelf) {
  run_ranks(2, [](Communicator& comm) {
    const int me = comm.rank(), other = 1 - me;
    const auto x = iota_from(10 * me, 64);
    std::vector<int32_t> y(64);
    // Both halves with itself: a copy.
    comm.send_recv(x.data(), x.size(), me, y.data(), y.size(), me, kI32);
    EXPECT_EQ(y, x);
    // One half with itself, the other with the peer. Rank 0 sends to itself and receives from
    // rank 1; rank 1 sends to rank 0 and receives the message it sent itself just before.
    std::vector<int32_t> z(64, -1);
    if (me == 0) {
      comm.send_recv(x.data(), x.size(), me, z.data(), z.size(), other, kI32);
      EXPECT_EQ(z, iota_from(10, 64));
      std::vector<int32_t> own(64);
      comm.recv(own.data(), own.size(), kI32, me);
      EXPECT_EQ(own, x);
    } else {
      comm.send(x.data(), x.size(), kI32, me);
      comm.send_recv(x.data(), x.size(), other, z.data(), z.size(), me, kI32);
      EXPECT_EQ(z, x);
    }
  });
}

TEST(SelfPointToPoint, AsyncFormsAreOrderedAfterQueuedOperations) {
  run_ranks(2, [](Communicator& comm) {
    const int me = comm.rank();
    std::vector<int32_t> buf(4096, me + 1), got(buf.size(), 0);
    // The send to self must see the all-reduce's result, not the value before it.
    Work reduce = comm.all_reduce_async(buf.data(), buf.data(), buf.size(), kI32, ReduceOp::kSum);
    Work send = comm.send_async(buf.data(), buf.size(), kI32, me);
    Work recv = comm.recv_async(got.data(), got.size(), kI32, me);
    reduce.wait();
    send.wait();
    recv.wait();
    EXPECT_EQ(got, std::vector<int32_t>(buf.size(), 3));
    std::vector<int32_t> pair(buf.size(), 0);
    Work both =
        comm.send_recv_async(got.data(), got.size(), me, pair.data(), pair.size(), me, kI32);
    both.wait();
    EXPECT_EQ(pair, got);
  });
}

TEST(SelfPointToPoint, RefusedReceivesLeaveTheCommunicatorUsable) {
  run_ranks(2, [](Communicator& comm) {
    const int me = comm.rank();
    int32_t x[4] = {1, 2, 3, 4}, y[8] = {};
    EXPECT_NE(invalid_message([&] { comm.recv(y, 4, kI32, me); }).find("no message sent to self"),
              std::string::npos);
    comm.send(x, 4, kI32, me);
    EXPECT_NE(invalid_message([&] { comm.recv(y, 8, kI32, me); }).find("is 16 bytes"),
              std::string::npos);
    EXPECT_NE(
        invalid_message([&] { comm.send_recv(x, 4, me, y, 8, me, kI32); }).find("is 16 bytes"),
        std::string::npos);
    comm.recv(y, 4, kI32, me);  // the refused calls took nothing
    EXPECT_EQ(y[3], 4);
    EXPECT_NE(
        invalid_message([&] { comm.send_recv(x, 4, me, y, 8, me, kI32); }).find("receives 32"),
        std::string::npos);
    int32_t v = 1;
    comm.all_reduce(&v, &v, 1, kI32, ReduceOp::kSum);
    EXPECT_EQ(v, 2);
  });
}

// After a failure the self part is refused like every other call.
TEST(SelfPointToPoint, RefusedOnABrokenCommunicator) {
  run_ranks(1, [](Communicator& comm) {
    int32_t x[4] = {1, 2, 3, 4}, y[4] = {};
    comm.send(x, 4, kI32, 0);
    comm.abort("test abort");
    std::string what = "(no chorus::Error)";
    try {
      comm.recv(y, 4, kI32, 0);
    } catch (const Error& e) {
      what = e.what();
    }
    EXPECT_NE(what.find("unusable after an earlier failure"), std::string::npos) << what;
    EXPECT_EQ(y[0], 0);
  });
}

TEST(SelfPointToPoint, OneRankGroupFromSplitRunsAShiftPattern) {
  run_ranks(3, [](Communicator& comm) {
    // Each rank alone in its group: the ring shift "send to the next, receive from the previous"
    // is a send_recv with itself.
    std::optional<Communicator> alone = comm.split(comm.rank(), 0);
    ASSERT_TRUE(alone.has_value());
    ASSERT_EQ(alone->size(), 1);
    const int next = (alone->rank() + 1) % alone->size();
    const int prev = (alone->rank() - 1 + alone->size()) % alone->size();
    const auto x = iota_from(comm.rank() * 1000, 257);
    std::vector<int32_t> y(x.size());
    alone->send_recv(x.data(), x.size(), next, y.data(), y.size(), prev, kI32);
    EXPECT_EQ(y, x);
    std::vector<int32_t> z(x.size());
    alone->send(std::span{x}, 0);
    alone->recv(std::span{z}, 0);
    EXPECT_EQ(z, x);
    // The parent is unaffected.
    int32_t v = 1;
    comm.all_reduce(&v, &v, 1, kI32, ReduceOp::kSum);
    EXPECT_EQ(v, 3);
  });
}

}  // namespace
}  // namespace chorus::testing
