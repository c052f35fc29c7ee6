// Single copy driven by the sender. The shared rendezvous copy (Request::kSenderIdle; the shm
// transport's FifoCtrl::assist): a sender
// that only waits for a large single-copy send may write part of the message into the
// receiver's buffer while the receiver reads the rest. Whoever is first takes the offered part:
// the sender when it waits (a late receiver), the receiver itself when the sender is busy
// elsewhere (a late sender). Either way the receiver must get exactly the bytes sent, and the
// sender's send may finish only once both parts are in place: it overwrites its buffer at once.
// And puts (Exchange::put), with which the direct all-gather pushes each block into place.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "chorus/communicator.h"
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
  return {
      seq, count, static_cast<uint8_t>(Collective::kSend), static_cast<uint8_t>(DataType::kF32), 0,
      1,   0};
}

enum class Late { kNobody, kReceiver, kSender };

uint64_t assisted_bytes(const transport::Wiring& w) {
  return dynamic_cast<const transport::ShmTransport&>(*w.transport).counters().assisted_bytes;
}

// Rank 0 sends messages of sizes around and above the 256 KiB from which the receiver shares the
// copy (odd ones, whose halves end inside a page), each from the same buffer that it refills as
// soon as the send is done; rank 1 checks every one.
enum class Expect { kAssisted, kNotAssisted, kEither };
void send_many(Late late, Expect expect) {
  static constexpr size_t kCounts[] = {65536, 65537, 100003, 262144, 300001, 1 << 20};
  // A late sender stays away until the receiver has the whole message (a pipe outside the
  // transport), so whatever the timing it can never take the part offered.
  int received[2];
  ASSERT_EQ(::pipe(received), 0);
  run_wired(2, [&](int rank, transport::Wiring& w, Exchange& ex) {
    ASSERT_TRUE(w.transport->capabilities().single_copy_from != SIZE_MAX)
        << "ranks of one host read each other";
    std::vector<float> buf(kCounts[std::size(kCounts) - 1]);
    uint64_t seq = 0;
    for (int round = 0; round < 8; ++round)
      for (size_t count : kCounts) {
        SCOPED_TRACE(::testing::Message() << "round " << round << " count " << count);
        ++seq;
        ex.begin("send", static_cast<int64_t>(seq), "test", kTimeout, stamp_for(seq, count));
        const std::vector<float> x = values(count, static_cast<int>(seq));
        if (rank == 0) {
          std::copy(x.begin(), x.end(), buf.begin());
          ex.post_send(1, buf.data(), count * sizeof(float), /*assist=*/true);
          if (late == Late::kSender) {
            ex.poke();  // the message is announced; then this rank is busy elsewhere
            char byte = 0;
            ASSERT_EQ(::read(received[0], &byte, 1), 1);
          }
          ex.wait_all();
          std::fill(buf.begin(), buf.end(), -1.0f);  // the send is done: the buffer is ours
        } else {
          if (late == Late::kReceiver) std::this_thread::sleep_for(std::chrono::milliseconds(3));
          std::vector<float> got(count, -2.0f);
          ex.post_recv(0, got.data(), count * sizeof(float));
          ex.wait_all();
          if (late == Late::kSender) {
            const char byte = 1;
            ASSERT_EQ(::write(received[1], &byte, 1), 1);
          }
          ASSERT_EQ(got, x);
        }
      }
    if (rank == 0 && expect == Expect::kAssisted)
      EXPECT_GT(assisted_bytes(w), 0u) << "the waiting sender never took a part";
    if (rank == 0 && expect == Expect::kNotAssisted)
      EXPECT_EQ(assisted_bytes(w), 0u) << "the busy sender took a part";
  });
  ::close(received[0]);
  ::close(received[1]);
}

TEST(AssistedRendezvous, AWaitingSenderWritesPartOfALateReceiversMessage) {
  send_many(Late::kReceiver, Expect::kAssisted);
}

TEST(AssistedRendezvous, AReceiverTakesBackWhatABusySenderLeaves) {
  send_many(Late::kSender, Expect::kNotAssisted);
}

TEST(AssistedRendezvous, EitherSideMayTakeThePartWhenBothWait) {
  send_many(Late::kNobody, Expect::kEither);
}

// Sends not marked assist are read by the receiver alone.
TEST(AssistedRendezvous, OnlySendsMarkedAssistAreShared) {
  run_wired(2, [&](int rank, transport::Wiring& w, Exchange& ex) {
    const size_t count = 1 << 20;
    const std::vector<float> x = values(count, 3);
    for (uint64_t seq = 1; seq <= 4; ++seq) {
      ex.begin("send", static_cast<int64_t>(seq), "test", kTimeout, stamp_for(seq, count));
      std::vector<float> got(count, -2.0f);
      if (rank == 0) {
        ex.post_send(1, x.data(), count * sizeof(float));
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
        ex.post_recv(0, got.data(), count * sizeof(float));
      }
      ex.wait_all();
      if (rank == 1) ASSERT_EQ(got, x);
    }
    EXPECT_EQ(assisted_bytes(w), 0u);
  });
}

// The collectives that wait at the sender: an in-place broadcast from either root and a
// blocking send, at sizes that share the copy, checked against the root's data.
TEST(AssistedRendezvous, BroadcastAndSendDeliverEveryByte) {
  run_ranks(2, [](Communicator& comm) {
    for (const char* algo : {"ring", "direct"}) {
      comm.set_algorithm(algo);
      for (size_t count : {size_t{65537}, size_t{262147}, size_t{1} << 21})
        for (int root = 0; root < 2; ++root) {
          SCOPED_TRACE(::testing::Message() << algo << " count " << count << " root " << root);
          std::vector<float> buf =
              comm.rank() == root ? values(count, root) : std::vector<float>(count, -1.0f);
          comm.broadcast(buf.data(), buf.data(), count, DataType::kF32, root);
          ASSERT_EQ(buf, values(count, root));
        }
    }
    comm.set_algorithm("auto");
    const size_t count = (size_t{1} << 20) + 5;
    if (comm.rank() == 0) {
      std::vector<float> x = values(count, 8);
      comm.send(x.data(), count, DataType::kF32, 1);
    } else {
      std::vector<float> got(count, -1.0f);
      comm.recv(got.data(), count, DataType::kF32, 0);
      ASSERT_EQ(got, values(count, 8));
    }
  });
}

// Puts (Exchange::put): every rank writes its block straight into every peer's result, where
// single copy is allowed between every pair. Sizes above the 128 KiB the direct all-gather pushes
// from, odd ones whose chunks end inside a page, in place and out of place, at 2, 3 and 4
// ranks, checked element by element; the pull (CHORUS_SHM_CMA=0: no puts) and the FIFO path
// (direct/fifo) must give the same.
void all_gather_pushed(int n, const RunOptions& options) {
  run_ranks(
      n,
      [&](Communicator& comm) {
        for (const char* algo : {"direct", "direct/fifo"}) {
          comm.set_algorithm(algo);
          for (size_t count : {size_t{1} << 18, size_t{262147}, size_t{1} << 20})
            for (bool in_place : {false, true}) {
              SCOPED_TRACE(::testing::Message()
                           << algo << " count " << count << (in_place ? " in place" : ""));
              const size_t r = static_cast<size_t>(comm.rank());
              std::vector<float> out(count * static_cast<size_t>(n), -1.0f);
              std::vector<float> mine = values(count, comm.rank() + 1);
              if (in_place) {
                std::copy(mine.begin(), mine.end(), out.begin() + r * count);
                comm.all_gather(out.data() + r * count, out.data(), count, DataType::kF32);
              } else {
                comm.all_gather(mine.data(), out.data(), count, DataType::kF32);
              }
              for (int p = 0; p < n; ++p) {
                const std::vector<float> want = values(count, p + 1);
                ASSERT_TRUE(std::equal(want.begin(), want.end(), out.begin() + p * count))
                    << "rank " << comm.rank() << ": block of rank " << p;
              }
            }
        }
      },
      options);
}

TEST(Puts, TheDirectAllGatherPushesEveryBlockIntoPlace) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE(::testing::Message() << n << " ranks");
    all_gather_pushed(n, {});
  }
}

// Results past CHORUS_STREAM_FROM: the pushing rank's own copy uses streaming stores.
TEST(Puts, StreamedOwnCopiesLandToo) {
  RunOptions options;
  options.env["CHORUS_STREAM_FROM"] = "65536";
  all_gather_pushed(2, options);
}

TEST(Puts, WithoutSingleCopyTheDirectAllGatherPulls) {
  RunOptions options;
  options.env["CHORUS_SHM_CMA"] = "0";
  all_gather_pushed(3, options);
}

// Where single copy is allowed between every pair, every rank says so; where not, none does.
TEST(Puts, EveryRankAgreesWhetherItMayPut) {
  for (const char* cma : {"1", "0"}) {
    RunOptions options;
    options.env["CHORUS_SHM_CMA"] = cma;
    run_wired(
        3,
        [&](int, transport::Wiring& w, Exchange& ex) {
          EXPECT_EQ(w.transport->capabilities().puts_to_all, std::string(cma) == "1");
          EXPECT_EQ(ex.puts(), std::string(cma) == "1");
        },
        options);
  }
}

}  // namespace
}  // namespace chorus::testing
