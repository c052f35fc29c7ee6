// Fan-out (Exchange::post_fan_out / post_fan_in): one rank writes a message once into its shared
// buffer and every other rank copies it out. Every rank as the writer in turn, messages from 0
// bytes to several times the buffer, the writer's own copy, and a reader that comes late (the
// writer must not reuse a slot before every reader has it); then the fanout broadcast's failures:
// a killed reader or writer, and ranks that call different broadcasts; and the small-message
// path (Exchange::fan_small) between posted fan-outs.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "chorus/communicator.h"
#include "error_helpers.h"
#include "exchange.h"
#include "multiproc.h"
#include "reference.h"
#include "transport/factory.h"
#include "transport/transport.h"

namespace chorus::testing {
namespace {

constexpr std::chrono::milliseconds kTimeout{30000};

transport::OpStamp stamp_for(uint64_t seq, size_t count, int root) {
  return {seq,
          count,
          static_cast<uint8_t>(Collective::kBroadcast),
          static_cast<uint8_t>(DataType::kF32),
          0,
          6,
          root};
}

// Every rank writes in turn, with sizes from empty to several buffers' worth (the default buffer
// is 8 x 256 KiB; 1 << 20 floats wraps it twice), with and without its own copy, and a message
// through the FIFO between two fan-outs to the same peers.
TEST(Fanout, EveryRankReachesEveryOtherAtEverySize) {
  static constexpr size_t kCounts[] = {0, 1, 1000, 65537, 300001, 1 << 20};
  run_wired(4, [](int rank, transport::Wiring& w, Exchange& ex) {
    ASSERT_TRUE(w.transport->capabilities().fans_out)
        << "one host, every rank on the shm transport";
    const int n = 4;
    uint64_t seq = 0;
    for (int root = 0; root < n; ++root)
      for (size_t count : kCounts)
        for (bool own_copy : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "root " << root << " count " << count
                                            << (own_copy ? " with own copy" : ""));
          const size_t bytes = count * sizeof(float);
          const std::vector<float> x = values(count, root + static_cast<int>(count));
          const std::vector<float> between = values(100, 9);
          ++seq;
          ex.begin("fanout", static_cast<int64_t>(seq), "test", kTimeout,
                   stamp_for(seq, count, root));
          std::vector<float> got(count, -1.0f), next(100, -1.0f);
          if (rank == root) {
            ex.post_fan_out(x.data(), bytes, own_copy ? got.data() : nullptr, count % 2 == 1);
            ex.post_send((rank + 1) % n, between.data(), sizeof(float) * between.size());
          } else {
            ex.post_fan_in(root, got.data(), bytes, count % 2 == 1);
            if (rank == (root + 1) % n)
              ex.post_recv(root, next.data(), sizeof(float) * next.size());
          }
          ex.wait_all();
          if (rank != root || own_copy) EXPECT_EQ(got, x) << "rank " << rank;
          if (rank == (root + 1) % n) EXPECT_EQ(next, between);
        }
  });
}

// One reader posts its receive only after the others have finished theirs' first slots and wait
// for more: the writer may not write past the late reader's position, and with a two-slot
// buffer of 256 bytes a single slot reused too early shows as wrong bytes.
TEST(Fanout, ASlotIsReusedOnlyOnceEveryReaderHasIt) {
  RunOptions options;
  options.env["CHORUS_SHM_FAN_SLOT_BYTES"] = "256";
  options.env["CHORUS_SHM_FAN_DEPTH"] = "2";
  constexpr size_t kCount = 20011;  // 313 slots
  run_wired(
      3,
      [&](int rank, transport::Wiring&, Exchange& ex) {
        const std::vector<float> x = values(kCount, 5);
        std::vector<float> got(kCount, -1.0f);
        ex.begin("fanout", 1, "test", kTimeout, stamp_for(1, kCount, 0));
        if (rank == 0) {
          ex.post_fan_out(x.data(), kCount * sizeof(float));
        } else {
          if (rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(200));
          ex.post_fan_in(0, got.data(), kCount * sizeof(float));
        }
        ex.wait_all();
        if (rank != 0) EXPECT_EQ(got, x) << "rank " << rank;
      },
      options);
}

// Many messages of mixed sizes in a row through a buffer of 1 KiB (pieces of at most 256 bytes):
// inline pieces, pieces that do not fit before the end of the ring (a skip to its start) and
// whole messages that wrap it, with the writer running ahead of its readers as far as the room
// allows, and readers that fall behind at times. Every message must arrive whole and in order.
TEST(Fanout, MixedSizesWrapTheBufferInOrder) {
  RunOptions options;
  options.env["CHORUS_SHM_FAN_SLOT_BYTES"] = "256";
  options.env["CHORUS_SHM_FAN_DEPTH"] = "3";
  static constexpr size_t kCounts[] = {1, 3, 4, 5, 17, 64, 70, 100, 1, 250};
  run_wired(
      3,
      [&](int rank, transport::Wiring&, Exchange& ex) {
        for (uint64_t seq = 1; seq <= 400; ++seq) {
          const size_t count = kCounts[seq % std::size(kCounts)];
          const int root = seq % 7 == 0 ? 2 : 0;
          const std::vector<float> x = values(count, static_cast<int>(seq));
          std::vector<float> got(count, -1.0f);
          ex.begin("fanout", static_cast<int64_t>(seq), "test", kTimeout,
                   stamp_for(seq, count, root));
          if (rank == root) {
            ex.post_fan_out(x.data(), count * sizeof(float));
          } else {
            if (rank == 1 && seq % 50 == 0)
              std::this_thread::sleep_for(std::chrono::milliseconds(5));
            ex.post_fan_in(root, got.data(), count * sizeof(float));
          }
          ex.wait_all();
          if (rank != root) ASSERT_EQ(got, x) << "message " << seq << " at rank " << rank;
        }
      },
      options);
}

// The small-message path (Exchange::fan_small) between fan-outs of posted requests, as an
// all-gather (every rank writes, every rank reads every other) and a broadcast (one writer) in
// turn, through a buffer of 1 KiB: whole messages written at once where one piece holds them and
// there is room, posted requests where not (too large for a piece, no room while a reader is
// late, a piece that has not arrived), skips to the ring's start, and empty messages. Every
// message must arrive whole and in order, and the writer's own copy be made.
TEST(Fanout, TheSmallPathAndPostedFanOutsInterleave) {
  RunOptions options;
  options.env["CHORUS_SHM_FAN_SLOT_BYTES"] = "256";
  options.env["CHORUS_SHM_FAN_DEPTH"] = "3";
  static constexpr size_t kCounts[] = {1, 3, 0, 4, 5, 17, 64, 70, 100, 1, 250, 40};
  constexpr int n = 3;
  run_wired(
      n,
      [&](int rank, transport::Wiring&, Exchange& ex) {
        for (uint64_t seq = 1; seq <= 600; ++seq) {
          const size_t count = kCounts[seq % std::size(kCounts)];
          const size_t bytes = count * sizeof(float);
          SCOPED_TRACE(::testing::Message() << "message " << seq << " count " << count);
          ex.begin("fanout", static_cast<int64_t>(seq), "test", kTimeout, stamp_for(seq, count, 0));
          if (rank == 1 && seq % 40 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          if (seq % 3 != 0) {  // all-gather
            std::vector<float> mine = values(count, static_cast<int>(seq) * n + rank);
            std::vector<float> all(count * n, -1.0f);
            const bool posted = seq % 5 == 0;
            if (posted) {
              ex.post_fan_out(mine.data(), bytes, all.data() + rank * count);
              for (int p = 0; p < n; ++p)
                if (p != rank) ex.post_fan_in(p, all.data() + p * count, bytes);
              ex.wait_all();
            } else {
              ex.fan_small(mine.data(), all.data() + rank * count, Exchange::kAllPeers,
                           reinterpret_cast<std::byte*>(all.data()), bytes, bytes);
            }
            std::fill(mine.begin(), mine.end(), -2.0f);  // sent: the buffer is the caller's again
            for (int p = 0; p < n; ++p) {
              const std::vector<float> want = values(count, static_cast<int>(seq) * n + p);
              ASSERT_TRUE(std::equal(want.begin(), want.end(), all.begin() + p * count))
                  << "rank " << rank << ": block of rank " << p << (posted ? " (posted)" : "");
            }
          } else {  // broadcast from rank seq % n
            const int root = static_cast<int>(seq % n);
            const std::vector<float> x = values(count, static_cast<int>(seq));
            std::vector<float> got(count, -1.0f);
            if (rank == root)
              ex.fan_small(x.data(), got.data(), Exchange::kNoPeer, nullptr, 0, bytes);
            else
              ex.fan_small(nullptr, nullptr, root, reinterpret_cast<std::byte*>(got.data()), 0,
                           bytes);
            ASSERT_EQ(got, x) << "rank " << rank;
          }
        }
      },
      options);
}

// The writer's sends finish once the whole message is in the shared buffer: at once for a
// message that fits (its caller may reuse its buffer while a late reader has not started), only
// after the slowest reader has made room for the rest of one that does not.
TEST(Fanout, TheWriterWaitsForItsSlowestReaderOnlyForRoom) {
  for (size_t count : {size_t{1000}, size_t{1} << 20}) {  // 4 KB, and 4 MiB of a 2 MiB buffer
    SCOPED_TRACE(::testing::Message() << "count " << count);
    run_wired(3, [&](int rank, transport::Wiring&, Exchange& ex) {
      std::vector<float> x = values(count, 6);
      const std::vector<float> sent = x;
      std::vector<float> got(count, -1.0f);
      ex.begin("fanout", 1, "test", kTimeout, stamp_for(1, count, 1));
      if (rank == 1) {
        const auto start = std::chrono::steady_clock::now();
        ex.post_fan_out(x.data(), count * sizeof(float));
        ex.wait_all();
        const auto took = std::chrono::steady_clock::now() - start;
        if (count > 1000)
          EXPECT_GE(took, std::chrono::milliseconds(250));
        else
          EXPECT_LT(took, std::chrono::milliseconds(250));
        std::fill(x.begin(), x.end(), -2.0f);  // the readers must not see this
      } else {
        // 600 ms late: the writer's 250 ms bound holds even if the ranks start up to 350 ms apart
        // (process start-up on a loaded 2-core machine).
        if (rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(600));
        ex.post_fan_in(1, got.data(), count * sizeof(float));
        ex.wait_all();
        EXPECT_EQ(got, sent) << "rank " << rank;
      }
    });
  }
}

// A reader killed in the middle of a fanout broadcast loop is named by the writer (which waits
// for it) and by the other readers; so is a killed writer.
TEST(Fanout, AKilledReaderOrWriterIsNamed) {
  for (int victim : {2, 0}) {
    SCOPED_TRACE(victim == 0 ? "writer (root) killed" : "reader killed");
    RunOptions options;
    options.may_fail = {victim};
    run_ranks(
        4,
        [&](Communicator& comm) {
          comm.set_algorithm("fanout");
          std::vector<float> v(4 << 20, 1.0f);
          if (comm.rank() == victim) {
            std::thread([] {
              std::this_thread::sleep_for(std::chrono::milliseconds(150));
              ::kill(::getpid(), SIGKILL);
            }).detach();
          }
          std::optional<Error> e;
          try {
            for (int i = 0; i < 100000; ++i)
              comm.broadcast(v.data(), v.data(), v.size(), DataType::kF32, 0);
          } catch (const Error& err) {
            e = err;
          }
          ASSERT_TRUE(e) << "the loop outlived the killed rank";
          EXPECT_EQ(e->peer(), victim) << e->what();
          EXPECT_TRUE(contains(e->what(), "rank " + std::to_string(victim))) << e->what();
          EXPECT_EQ(e->kind(), ErrorKind::kPeerFailure) << e->what();
        },
        options);
  }
}

// A reader that calls a broadcast of another count, or another collective, finds the writer's
// message does not match its call: both calls are named, on both sides.
TEST(Fanout, ReadersOfAnotherCallFailNamingBoth) {
  RunOptions options;
  options.env["CHORUS_TIMEOUT"] = "5";
  static float buf[4096];
  run_ranks(
      3,
      [&](Communicator& comm) {
        comm.set_algorithm("fanout");
        auto e = error_of([&] {
          comm.broadcast(buf, buf, comm.rank() == 2 ? 1001 : 1000, DataType::kF32, 0);
          comm.barrier();
        });
        ASSERT_TRUE(e);
        EXPECT_TRUE(e->kind() == ErrorKind::kMismatch || e->kind() == ErrorKind::kPeerFailure)
            << e->what();
        EXPECT_TRUE(contains(e->what(), "count 1000") && contains(e->what(), "count 1001"))
            << e->what();
      },
      options);
}

// Ranks started with different fan-out buffers cannot read each other's: set-up says which
// setting differs.
TEST(Fanout, DifferentBufferSettingsAreRejectedAtSetUp) {
  run_processes(2, [](int rank) {
    if (rank == 1) ::setenv("CHORUS_SHM_FAN_DEPTH", "4", 1);
    auto e = error_of([] { Communicator comm = Communicator::from_env(); });
    ASSERT_TRUE(e);
    EXPECT_TRUE(contains(e->what(), "CHORUS_SHM_FAN_DEPTH")) << e->what();
  });
}

}  // namespace
}  // namespace chorus::testing
