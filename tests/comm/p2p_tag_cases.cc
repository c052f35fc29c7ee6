#include "p2p_tag_cases.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>

namespace chorus::testing {
namespace {

constexpr auto kI32 = DataType::kI32;
constexpr size_t kSmall = 3;
constexpr size_t kLarge = size_t{1} << 20;  // 4 MiB: past every transport's eager size

// Message k of `tag` from `sender`: its first element says which, the rest count up from there.
std::vector<int32_t> message(int sender, int tag, int k, size_t n) {
  std::vector<int32_t> v(n);
  const int32_t first = sender * 1000000 + tag * 1000 + k;
  for (size_t i = 0; i < n; ++i) v[i] = first + static_cast<int32_t>(i % 997);
  return v;
}

// Leaves every link in step: a collective after the messages.
void agree(Communicator& comm) {
  int32_t v = 1;
  comm.all_reduce(&v, &v, 1, kI32, ReduceOp::kSum);
  EXPECT_EQ(v, comm.size());
}

// Rank 1 sends tag 1 (large), tag 2, tag 1 (small) to rank 0, which receives tag 2 first, then
// the two of tag 1 in the order sent; rank 2 sends tag 0 twice around them.
void out_of_order(Communicator& comm) {
  const int me = comm.rank();
  if (me == 1) {
    const auto a = message(1, 1, 0, kLarge), b = message(1, 2, 0, kSmall),
               c = message(1, 1, 1, kSmall);
    Work wa = comm.send_async(a.data(), a.size(), kI32, 0, 1);
    Work wb = comm.send_async(b.data(), b.size(), kI32, 0, 2);
    Work wc = comm.send_async(c.data(), c.size(), kI32, 0, 1);
    wa.wait();
    wb.wait();
    wc.wait();
  } else if (me == 2) {
    const auto a = message(2, 0, 0, kSmall), b = message(2, 0, 1, kLarge);
    comm.send(a.data(), a.size(), kI32, 0);
    comm.send(b.data(), b.size(), kI32, 0);
  } else {
    std::vector<int32_t> b(kSmall), a(kLarge), c(kSmall), z0(kSmall), z1(kLarge);
    comm.recv(b.data(), b.size(), kI32, 1, 2);
    EXPECT_EQ(b, message(1, 2, 0, kSmall)) << "tag 2 from rank 1";
    comm.recv(z0.data(), z0.size(), kI32, 2);
    comm.recv(a.data(), a.size(), kI32, 1, 1);
    EXPECT_EQ(a, message(1, 1, 0, kLarge)) << "first tag-1 message from rank 1 (set aside)";
    comm.recv(c.data(), c.size(), kI32, 1, 1);
    EXPECT_EQ(c, message(1, 1, 1, kSmall)) << "second tag-1 message from rank 1";
    comm.recv(z1.data(), z1.size(), kI32, 2, 0);
    EXPECT_EQ(z0, message(2, 0, 0, kSmall));
    EXPECT_EQ(z1, message(2, 0, 1, kLarge));
  }
  agree(comm);
}

// Every rank sends the next a small message with tag 5, then exchanges a large one with tag 6
// with its neighbours in one send_recv (whose receive sets the tag-5 message aside), then
// receives the tag-5 message.
void send_recv_tags(Communicator& comm) {
  const int me = comm.rank(), n = comm.size(), next = (me + 1) % n, prev = (me + n - 1) % n;
  const auto five = message(me, 5, 0, kSmall), six = message(me, 6, 0, kLarge);
  std::vector<int32_t> got5(kSmall), got6(kLarge);
  Work s = comm.send_async(five.data(), five.size(), kI32, next, 5);
  Work w = comm.send_recv_async(six.data(), six.size(), next, got6.data(), got6.size(), prev, kI32,
                                6, 6);
  w.wait();
  EXPECT_EQ(w.source(), prev);
  EXPECT_EQ(got6, message(prev, 6, 0, kLarge));
  EXPECT_EQ(comm.recv(got5.data(), got5.size(), kI32, prev, 5), prev);
  EXPECT_EQ(got5, message(prev, 5, 0, kSmall));
  s.wait();
  agree(comm);
}

// Ranks 1 and 2 each send two messages to rank 0 (tags 7 then 8); rank 0 receives tag 8 from
// any source twice, then tag 7 from any source twice: each payload is its sender's, and each
// sender is named once per tag.
void any_source(Communicator& comm) {
  const int me = comm.rank();
  if (me != 0) {
    const auto a = message(me, 7, 0, me == 1 ? kLarge : kSmall), b = message(me, 8, 0, kSmall);
    comm.send(a.data(), a.size(), kI32, 0, 7);
    comm.send(b.data(), b.size(), kI32, 0, 8);
  } else {
    std::set<int> eight, seven;
    for (int k = 0; k < 2; ++k) {
      std::vector<int32_t> b(kSmall);
      const int from = comm.recv(b.data(), b.size(), kI32, kAnySource, 8);
      ASSERT_TRUE(from == 1 || from == 2) << from;
      EXPECT_EQ(b, message(from, 8, 0, kSmall));
      eight.insert(from);
    }
    for (int k = 0; k < 2; ++k) {
      // The two tag-7 messages differ in size: receive the one of this size from either rank.
      const size_t n = k == 0 ? kLarge : kSmall;
      std::vector<int32_t> a(n);
      Work w = comm.recv_async(a.data(), a.size(), kI32, k == 0 ? 1 : kAnySource, 7);
      w.wait();
      const int from = w.source();
      EXPECT_EQ(from, k == 0 ? 1 : 2);
      EXPECT_EQ(a, message(from, 7, 0, n));
      seven.insert(from);
    }
    EXPECT_EQ(eight, (std::set<int>{1, 2}));
    EXPECT_EQ(seven, (std::set<int>{1, 2}));
  }
  agree(comm);
}

// Each rank sends to itself with tags 3, 4, 3 and receives 4 first; zero-byte messages with a
// tag pass between ranks and to self.
void self_and_empty(Communicator& comm) {
  const int me = comm.rank(), n = comm.size(), next = (me + 1) % n, prev = (me + n - 1) % n;
  const auto a = message(me, 3, 0, kSmall), b = message(me, 4, 0, kSmall),
             c = message(me, 3, 1, kSmall);
  comm.send(a.data(), a.size(), kI32, me, 3);
  comm.send(b.data(), b.size(), kI32, me, 4);
  comm.send(c.data(), c.size(), kI32, me, 3);
  std::vector<int32_t> r(kSmall);
  Work w = comm.recv_async(r.data(), r.size(), kI32, me, 4);
  w.wait();
  EXPECT_EQ(w.source(), me);
  EXPECT_EQ(r, b);
  comm.recv(r.data(), r.size(), kI32, me, 3);
  EXPECT_EQ(r, a);
  comm.recv(r.data(), r.size(), kI32, me, 3);
  EXPECT_EQ(r, c);
  // Empty messages: tag 9 then tag 10 to the next rank, received the other way round.
  Work s9 = comm.send_async(nullptr, 0, kI32, next, 9);
  Work s10 = comm.send_async(nullptr, 0, kI32, next, 10);
  comm.recv(nullptr, 0, kI32, prev, 10);
  comm.recv(nullptr, 0, kI32, prev, 9);
  s9.wait();
  s10.wait();
  agree(comm);
}

}  // namespace

std::vector<P2pTagCase> p2p_tag_cases() {
  return {{"OutOfOrder", out_of_order},
          {"SendRecvTags", send_recv_tags},
          {"AnySource", any_source},
          {"SelfAndEmpty", self_and_empty}};
}

}  // namespace chorus::testing
