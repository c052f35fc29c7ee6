// Forwarding (Exchange::post_forward): a receive whose result travels on to another rank. Over
// shared memory the link writes each incoming piece into the next rank's FIFO in the same pass
// that writes it to dst; when that FIFO is full it delivers the piece alone and sends it from dst
// later, and single-copy messages are received first and then sent. Every way must deliver the
// same bytes, and a receive must never wait for its forward's receiver.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "exchange.h"
#include "multiproc.h"
#include "reference.h"
#include "transport/factory.h"
#include "transport/shm/shm_transport.h"
#include "transport/transport.h"

namespace chorus::testing {
namespace {

constexpr std::chrono::milliseconds kTimeout{30000};

transport::OpStamp stamp_for(uint64_t seq, size_t count) {
  return {seq,
          count,
          static_cast<uint8_t>(Collective::kAllReduce),
          static_cast<uint8_t>(DataType::kF32),
          static_cast<uint8_t>(ReduceOp::kSum),
          1,
          0};
}

struct Round {
  size_t count;  // floats
  bool fifo;     // sends through the FIFO (else single copy where the transport has it)
  bool stream;   // streaming stores into dst
};

// Counts above and below the FIFO's 8 x 64 KiB, odd ones, and 0.
constexpr Round kRounds[] = {
    {0, true, false},       {1, true, true},       {1000, true, false},
    {65537, true, true},    {300001, true, false}, {300001, true, true},
    {300001, false, false}, {300001, false, true}, {16385, false, false},
};

// Rank 0 sends x; rank 1 receives it, adds its own y and forwards the sum to rank 2 (or, with
// two ranks, back to rank 0).
void chain(int world) {
  run_wired(world, [&](int rank, transport::Wiring& w, Exchange& ex) {
    const int last = world - 1 == 1 ? 0 : 2;
    uint64_t seq = 0;
    for (const Round& round : kRounds) {
      SCOPED_TRACE(::testing::Message()
                   << "count " << round.count << (round.fifo ? " fifo" : " single copy")
                   << (round.stream ? " stream" : ""));
      const size_t bytes = round.count * sizeof(float);
      const std::vector<float> x = values(round.count, 1), y = values(round.count, 2);
      std::vector<float> sum(round.count);
      for (size_t i = 0; i < round.count; ++i) sum[i] = x[i] + y[i];
      ex.begin("forward", static_cast<int64_t>(++seq), "test", kTimeout,
               stamp_for(seq, round.count), round.fifo);
      const auto& counters = dynamic_cast<transport::ShmTransport&>(*w.transport).counters();
      const uint64_t fused_before = counters.forwarded_in_pass_bytes;
      std::vector<float> got(round.count, -1.0f);
      if (rank == 0) ex.post_send(1, x.data(), bytes);
      if (rank == 1) {
        const auto id = ex.post_recv_reduce(0, got.data(), y.data(), round.count, DataType::kF32,
                                            ReduceOp::kSum, round.stream);
        ex.post_forward(id, last);
      }
      if (rank == last) ex.post_recv(1, got.data(), bytes);
      ex.wait_all();
      if ((rank == 1 || rank == last) && bytes > 0)
        EXPECT_EQ(std::memcmp(got.data(), sum.data(), bytes), 0) << "rank " << rank;
      if (rank == 1 && round.fifo && round.count > 1000)
        EXPECT_GT(counters.forwarded_in_pass_bytes, fused_before)
            << "no piece was forwarded in the pass that received it";
    }
  });
}

TEST(Forward, ReduceAndForwardAlongAChain) { chain(3); }
TEST(Forward, ReduceAndForwardBackToTheSender) { chain(2); }

// Rank 2 stays away until rank 1's receive has finished: rank 1's forward fills the FIFO to rank
// 2, the rest of the message is delivered without it and sent from dst afterwards.
TEST(Forward, AFullFifoDoesNotHoldUpTheReceive) {
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  constexpr size_t kCount = 1 << 20;  // 4 MiB: 64 FIFO slots
  run_wired(3, [&](int rank, transport::Wiring&, Exchange& ex) {
    const std::vector<float> x = values(kCount, 3);
    std::vector<float> got(kCount, -1.0f);
    ex.begin("forward", 1, "test", kTimeout, stamp_for(1, kCount), true);
    if (rank == 0) {
      ex.post_send(1, x.data(), kCount * sizeof(float));
      ex.wait_all();
    } else if (rank == 1) {
      const auto id = ex.post_recv(0, got.data(), kCount * sizeof(float));
      ex.post_forward(id, 2);
      ex.wait(id);  // would hang if the receive waited for room in the FIFO to rank 2
      char byte = 1;
      ASSERT_EQ(::write(go[1], &byte, 1), 1);
      ex.wait_all();
      EXPECT_EQ(std::memcmp(got.data(), x.data(), kCount * sizeof(float)), 0);
    } else {
      char byte = 0;
      ASSERT_EQ(::read(go[0], &byte, 1), 1);
      ex.post_recv(1, got.data(), kCount * sizeof(float));
      ex.wait_all();
      EXPECT_EQ(std::memcmp(got.data(), x.data(), kCount * sizeof(float)), 0);
    }
  });
  ::close(go[0]);
  ::close(go[1]);
}

// A forward runs after sends posted before it to the same peer, and its receiver sees them in
// order.
TEST(Forward, KeepsItsPlaceAmongSendsToItsPeer) {
  constexpr size_t kCount = 200000;
  run_wired(3, [&](int rank, transport::Wiring&, Exchange& ex) {
    const std::vector<float> a = values(kCount, 4), b = values(kCount, 5), c = values(kCount, 6);
    const size_t bytes = kCount * sizeof(float);
    ex.begin("forward", 1, "test", kTimeout, stamp_for(1, kCount), true);
    if (rank == 0) {
      ex.post_send(1, b.data(), bytes);
      ex.wait_all();
    } else if (rank == 1) {
      std::vector<float> got(kCount);
      ex.post_send(2, a.data(), bytes);
      ex.post_forward(ex.post_recv(0, got.data(), bytes), 2);
      ex.post_send(2, c.data(), bytes);
      ex.wait_all();
    } else {
      std::vector<float> g1(kCount), g2(kCount), g3(kCount);
      ex.post_recv(1, g1.data(), bytes);
      ex.post_recv(1, g2.data(), bytes);
      ex.post_recv(1, g3.data(), bytes);
      ex.wait_all();
      EXPECT_EQ(std::memcmp(g1.data(), a.data(), bytes), 0);
      EXPECT_EQ(std::memcmp(g2.data(), b.data(), bytes), 0);
      EXPECT_EQ(std::memcmp(g3.data(), c.data(), bytes), 0);
    }
  });
}

}  // namespace
}  // namespace chorus::testing
