// The FIFO path (algo::Path::kFifo, the "<algorithm>/fifo" variants): an operation's sends copy
// through the shared-memory FIFO whatever their size, where they would otherwise be read single
// copy. Observable from the sender: a FIFO send completes once its bytes are in the slots, with
// no receiver; a single-copy send completes only after the receiver has read it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "algo/algorithm.h"
#include "exchange.h"
#include "multiproc.h"
#include "transport/factory.h"
#include "transport/transport.h"

namespace chorus::testing {
namespace {

// Above the 32 KiB single-copy threshold, within the FIFO's 8 slots of 64 KiB.
constexpr size_t kBytes = 256 << 10;

std::vector<std::byte> pattern(int salt) {
  std::vector<std::byte> v(kBytes);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::byte>((i * 131 + salt) & 0xff);
  return v;
}

transport::OpStamp stamp_for(uint64_t seq) {
  return {seq,
          kBytes,
          static_cast<uint8_t>(Collective::kBroadcast),
          static_cast<uint8_t>(DataType::kU8),
          0,
          1,
          0};
}

// Pokes the exchange for up to `for_ms`; returns whether the request finished.
bool finishes_alone(Exchange& ex, Exchange::RequestId id, int for_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(for_ms);
  while (!ex.done(id) && std::chrono::steady_clock::now() < until) {
    ex.poke();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return ex.done(id);
}

TEST(FifoPath, LargeSendsCopyThroughTheFifoInsteadOfSingleCopy) {
  int go[2];  // rank 0 -> rank 1: "post your receive now", outside the transport
  ASSERT_EQ(::pipe(go), 0);
  SharedBetweenRanks<std::atomic<bool>> no_single_copy;
  run_wired(2, [&](int rank, transport::Wiring& w, Exchange& ex) {
    if (w.transport->capabilities().single_copy_from == SIZE_MAX) {
      *no_single_copy = true;
      return;
    }
    for (int round = 0; round < 2; ++round) {
      const bool fifo = round == 0;
      const std::vector<std::byte> data = pattern(round);
      ex.begin("fifo-path", round + 1, "test", std::chrono::milliseconds(30000),
               stamp_for(static_cast<uint64_t>(round + 1)), fifo);
      if (rank == 0) {
        const auto id = ex.post_send(1, data.data(), data.size());
        // The receiver is parked on the pipe: only a FIFO send can finish.
        EXPECT_EQ(finishes_alone(ex, id, fifo ? 5000 : 100), fifo)
            << (fifo ? "the /fifo send waited for the receiver"
                     : "the single-copy send finished without the receiver");
        char byte = 1;
        ASSERT_EQ(::write(go[1], &byte, 1), 1);
        ex.wait_all();
      } else {
        char byte = 0;
        ASSERT_EQ(::read(go[0], &byte, 1), 1);
        std::vector<std::byte> got(kBytes, std::byte{0});
        ex.post_recv(0, got.data(), got.size());
        ex.wait_all();
        EXPECT_EQ(std::memcmp(got.data(), data.data(), kBytes), 0) << "round " << round;
      }
    }
  });
  ::close(go[0]);
  ::close(go[1]);
  if (*no_single_copy) GTEST_SKIP() << "single copy is unavailable here: both paths are the FIFO";
}

}  // namespace
}  // namespace chorus::testing
