// The tuner: its table format, its predictions, and that every rank of a communicator follows
// rank 0's table (so their algorithms always pair up).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "algo/tuner.h"
#include "chorus/communicator.h"
#include "chorus/error.h"
#include "multiproc.h"

namespace chorus {
namespace {

using algo::Algorithm;
using algo::TuneTable;
using testing::run_processes;
using testing::run_ranks;

constexpr const char* kTable = R"(# two curves that cross at 1000 bytes
2 all_reduce direct 8:1 1000:3 100000:1000
2 all_reduce ring 8:10 1000:3 100000:50   # trailing comment
4 broadcast tree 64:5
)";

TEST(Tuner, ParsesFormatsAndRoundTrips) {
  const TuneTable t = TuneTable::parse(kTable, "test");
  EXPECT_EQ(t.origin, "test");
  EXPECT_TRUE(t.covers(2, Collective::kAllReduce));
  EXPECT_FALSE(t.covers(2, Collective::kBroadcast));
  EXPECT_FALSE(t.covers(3, Collective::kAllReduce));
  EXPECT_TRUE(t.covers(4, Collective::kBroadcast));
  const TuneTable again = TuneTable::parse(t.format(), "again");
  EXPECT_EQ(again.format(), t.format());
}

TEST(Tuner, InterpolatesBetweenAndExtrapolatesBeyondMeasuredSizes) {
  const TuneTable t = TuneTable::parse(kTable, "test");
  const auto at = [&](Algorithm a, size_t bytes) {
    return *t.predict_us(2, Collective::kAllReduce, a, bytes);
  };
  EXPECT_DOUBLE_EQ(at(Algorithm::kDirect, 1), 1);  // below the first point: its time
  EXPECT_DOUBLE_EQ(at(Algorithm::kDirect, 8), 1);
  EXPECT_DOUBLE_EQ(at(Algorithm::kRing, 1000), 3);
  EXPECT_NEAR(at(Algorithm::kRing, 504), 6.5, 1e-9);  // halfway between 8 and 1000
  // Beyond 100000 bytes: the last segment's slope (47 us per 99000 bytes).
  EXPECT_NEAR(at(Algorithm::kRing, 199000), 50 + 47, 1e-9);
  EXPECT_FALSE(t.predict_us(2, Collective::kAllReduce, Algorithm::kTree, 8));
  const auto ab = t.alpha_beta(2, Collective::kAllReduce, Algorithm::kRing);
  ASSERT_TRUE(ab);
  EXPECT_DOUBLE_EQ(ab->first, 10);
  EXPECT_NEAR(ab->second, 47.0 / 99000 * (1 << 20), 1e-6);
}

TEST(Tuner, PicksTheFastestPredictionOnEachSideOfTheCrossover) {
  const TuneTable t = TuneTable::parse(kTable, "test");
  EXPECT_EQ(t.fastest(2, Collective::kAllReduce, 64), Algorithm::kDirect);
  EXPECT_EQ(t.fastest(2, Collective::kAllReduce, 50000), Algorithm::kRing);
  EXPECT_EQ(t.fastest(2, Collective::kAllReduce, 1 << 30), Algorithm::kRing);
  EXPECT_FALSE(t.fastest(3, Collective::kAllReduce, 64));
}

TEST(Tuner, NearTiesKeepThePreferredAlgorithm) {
  const TuneTable t =
      TuneTable::parse("2 all_reduce direct 8:1.00\n2 all_reduce ring 8:0.95\n", "t");
  EXPECT_EQ(t.fastest(2, Collective::kAllReduce, 8), Algorithm::kRing);
  // direct is within 10% of ring: preferred, it stays.
  EXPECT_EQ(t.fastest(2, Collective::kAllReduce, 8, Algorithm::kDirect), Algorithm::kDirect);
  const TuneTable far = TuneTable::parse("2 all_reduce direct 8:2\n2 all_reduce ring 8:1\n", "t");
  EXPECT_EQ(far.fastest(2, Collective::kAllReduce, 8, Algorithm::kDirect), Algorithm::kRing);
}

// "<algorithm>/fifo" curves (algo::Path::kFifo) compete with the plain ones: the selector picks
// an algorithm and its path together.
TEST(Tuner, FifoVariantsRoundTripAndCompeteWithSingleCopy) {
  const TuneTable t = TuneTable::parse(
      "2 all_reduce ring 8:1 1000000:10\n"
      "2 all_reduce ring/fifo 8:2 1000000:5\n"
      "2 all_reduce direct 8:3 1000000:30\n",
      "t");
  const algo::Variant fifo{Algorithm::kRing, algo::Path::kFifo};
  EXPECT_EQ(TuneTable::parse(t.format(), "again").format(), t.format());
  EXPECT_NE(t.format().find("ring/fifo"), std::string::npos);
  EXPECT_DOUBLE_EQ(*t.predict_us(2, Collective::kAllReduce, fifo, 8), 2);
  EXPECT_DOUBLE_EQ(*t.predict_us(2, Collective::kAllReduce, Algorithm::kRing, 8), 1);
  EXPECT_FALSE(t.predict_us(2, Collective::kAllReduce,
                            algo::Variant{Algorithm::kDirect, algo::Path::kFifo}, 8));
  EXPECT_EQ(t.fastest(2, Collective::kAllReduce, 8), Algorithm::kRing);
  EXPECT_EQ(t.fastest(2, Collective::kAllReduce, 1000000), fifo);
  // Within 10% of its single-copy twin, a FIFO variant yields to it (below the single-copy
  // threshold the two are the same code), even when another algorithm is preferred.
  const TuneTable tie = TuneTable::parse(
      "2 all_reduce ring 8:1.05\n2 all_reduce ring/fifo 8:1\n"
      "2 all_reduce direct 8:3\n",
      "t");
  EXPECT_EQ(tie.fastest(2, Collective::kAllReduce, 8), Algorithm::kRing);
  EXPECT_EQ(tie.fastest(2, Collective::kAllReduce, 8, Algorithm::kDirect), Algorithm::kRing);
  EXPECT_EQ(algo::to_string(fifo), "ring/fifo");
  EXPECT_EQ(algo::parse_variant("twoshot/fifo"),
            (algo::Variant{Algorithm::kTwoShot, algo::Path::kFifo}));
  EXPECT_EQ(algo::parse_variant("tree"), algo::Variant{Algorithm::kTree});
  EXPECT_FALSE(algo::parse_variant("/fifo"));
  EXPECT_FALSE(algo::parse_variant("ring/fast"));
}

// "<collective>/in-place" curves: broadcast measured in place. They round-trip, the selector
// chooses broadcasts by them, and path_for() compares an algorithm's two paths by them.
TEST(Tuner, InPlaceCurvesRoundTripAndPickTheRootsPath) {
  const TuneTable t = TuneTable::parse(
      "2 broadcast direct 8:1 1000000:10\n"
      "2 broadcast/in-place direct 8:1 1000000:10\n"
      "2 broadcast/in-place direct/fifo 8:2 1000000:5\n"
      "4 broadcast/in-place direct 8:1\n",
      "t");
  EXPECT_EQ(TuneTable::parse(t.format(), "again").format(), t.format());
  EXPECT_NE(t.format().find("2 broadcast/in-place direct/fifo 8:2"), std::string::npos);
  const algo::Variant fifo{Algorithm::kDirect, algo::Path::kFifo};
  EXPECT_DOUBLE_EQ(*t.predict_us(2, Collective::kBroadcast, Algorithm::kDirect, 8), 1);
  EXPECT_DOUBLE_EQ(*t.predict_us(2, Collective::kBroadcast, fifo, 1000000, true), 5);
  EXPECT_FALSE(
      t.predict_us(2, Collective::kBroadcast, fifo, 1000000));  // no such out-of-place curve
  EXPECT_EQ(t.path_for(2, Collective::kBroadcast, Algorithm::kDirect, 8, true),
            algo::Path::kSingleCopy);
  EXPECT_EQ(t.path_for(2, Collective::kBroadcast, Algorithm::kDirect, 1000000, true),
            algo::Path::kFifo);
  EXPECT_FALSE(t.path_for(2, Collective::kBroadcast, Algorithm::kRing, 8, true));  // no curves
  EXPECT_FALSE(
      t.path_for(4, Collective::kBroadcast, Algorithm::kDirect, 8, true));  // one path only
  // In-place curves alone do not cover a collective (covers() counts out-of-place ones).
  EXPECT_FALSE(t.covers(4, Collective::kBroadcast));
  EXPECT_EQ(t.fastest(2, Collective::kBroadcast, 1000000), Algorithm::kDirect);
  // By the in-place curves where an algorithm has one (the selector's choice for broadcast).
  const TuneTable both = TuneTable::parse(
      "2 broadcast direct 8:1 1000000:10\n"
      "2 broadcast ring 8:1 1000000:12\n"
      "2 broadcast tree 8:1 1000000:11\n"
      "2 broadcast/in-place direct 8:1 1000000:10\n"
      "2 broadcast/in-place ring 8:1 1000000:6\n",
      "both");
  EXPECT_EQ(both.fastest(2, Collective::kBroadcast, 1000000), Algorithm::kDirect);
  EXPECT_EQ(both.fastest(2, Collective::kBroadcast, 1000000, std::nullopt, true), Algorithm::kRing);
  const auto ab = t.alpha_beta(2, Collective::kBroadcast, fifo, true);
  ASSERT_TRUE(ab);
  EXPECT_DOUBLE_EQ(ab->first, 2);
}

TEST(Tuner, MalformedTablesNameTheLine) {
  const auto error_of = [](const char* text) -> std::string {
    try {
      TuneTable::parse(text, "bad.txt");
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error_of("2 all_reduce ring 8:1\n1 all_reduce ring 8:1").find("bad.txt line 2"),
            std::string::npos);
  EXPECT_NE(error_of("2 all_reduce warp 8:1").find("no algorithm 'warp'"), std::string::npos);
  EXPECT_NE(error_of("2 all_reduce ring/fast 8:1").find("no algorithm 'ring/fast'"),
            std::string::npos);
  EXPECT_NE(error_of("2 gather ring 8:1").find("no algorithm 'ring' for gather"),
            std::string::npos);
  EXPECT_NE(error_of("2 all_reduce ring 8-1").find("bad point"), std::string::npos);
  EXPECT_NE(error_of("2 all_reduce ring 8:-1").find("bad time"), std::string::npos);
  EXPECT_NE(error_of("2 all_reduce ring").find("no points"), std::string::npos);
  EXPECT_NE(error_of("2 all_reduce").find("missing"), std::string::npos);
  EXPECT_NE(error_of("2 broadcast/in-plac direct 8:1").find("unknown collective"),
            std::string::npos);
}

TEST(Tuner, TheBuiltInTableParses) {
  EXPECT_NO_THROW(TuneTable::parse(algo::builtin_tune_text(), "built-in"));
}

std::string write_table(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

// The selector follows the table, and explain() reports its predictions.
TEST(Tuner, SelectorAndExplainFollowTheTable) {
  const std::string path = write_table("tune_follow.txt",
                                       "2 all_reduce tree 8:1 1000000:2\n"
                                       "2 all_reduce ring 8:5 1000000:6\n"
                                       "2 all_reduce direct 8:7 1000000:8\n");
  testing::RunOptions options;
  options.env["CHORUS_TUNE_FILE"] = path;
  run_ranks(
      2,
      [](Communicator& comm) {
        EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 8), "tree");
        EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 1 << 20), "tree");
        // Not covered by the table: the cost model (here its defaults; at 2 ranks every
        // broadcast form ties, and the fixed rule breaks the tie).
        EXPECT_EQ(comm.algorithm_for(Collective::kBroadcast, 8), "direct");
        bool saw_tree = false;
        for (const AlgorithmEstimate& e : comm.explain(Collective::kAllReduce, 500000)) {
          if (e.algorithm == "tree") {
            saw_tree = true;
            EXPECT_TRUE(e.chosen);
            EXPECT_NEAR(e.predicted_us, 1.5, 1e-3);
          } else if (e.algorithm == "ring") {
            EXPECT_FALSE(e.chosen);
            EXPECT_NEAR(e.predicted_us, 5.5, 1e-3);
          }
        }
        EXPECT_TRUE(saw_tree);
        // And the chosen algorithm runs and is exact.
        std::vector<int32_t> v(1000, comm.rank() + 1), out(1000);
        comm.all_reduce(v.data(), out.data(), v.size(), DataType::kI32, ReduceOp::kSum);
        EXPECT_EQ(out.front(), 3);
        EXPECT_EQ(out.back(), 3);
      },
      options);
}

// A table whose "/fifo" curve is fastest makes the selector pick that variant; it runs exactly,
// and explain() lists both paths of each algorithm where some peer is read single copy. Below
// the single-copy threshold (32 KiB) the two variants are the same code: the plain one is kept
// whatever the table says.
TEST(Tuner, SelectorPicksTheFifoPathWhereTheTableSaysSo) {
  const std::string path = write_table("tune_fifo.txt",
                                       "2 all_reduce ring 8:1 1000000:10\n"
                                       "2 all_reduce ring/fifo 8:0.5 1000000:5\n");
  testing::RunOptions options;
  options.env["CHORUS_TUNE_FILE"] = path;
  run_ranks(
      2,
      [](Communicator& comm) {
        bool saw_fifo = false;
        for (const AlgorithmEstimate& e : comm.explain(Collective::kAllReduce, 1000000))
          if (e.algorithm == "ring/fifo") {
            saw_fifo = true;
            EXPECT_TRUE(e.chosen);
            EXPECT_NEAR(e.predicted_us, 5, 1e-3);
          }
        if (!saw_fifo) {
          std::printf("single copy is unavailable here: no /fifo variants\n");
        } else {
          EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 1000000), "ring/fifo");
        }
        EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 8), "ring");
        EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 32767), "ring");
        std::vector<int32_t> v(300000, comm.rank() + 1), out(300000);
        comm.all_reduce(v.data(), out.data(), v.size(), DataType::kI32, ReduceOp::kSum);
        EXPECT_EQ(out.front(), 3);
        EXPECT_EQ(out.back(), 3);
        // Forced by name, like any algorithm.
        comm.set_algorithm("twoshot/fifo");
        EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 8), "twoshot/fifo");
        comm.all_reduce(v.data(), out.data(), v.size(), DataType::kI32, ReduceOp::kSum);
        EXPECT_EQ(out[12345], 3);
        // A communicator split off inherits the forced variant.
        std::optional<Communicator> child = comm.split(0, comm.rank());
        ASSERT_TRUE(child.has_value());
        EXPECT_EQ(child->algorithm_for(Collective::kAllReduce, 8), "twoshot/fifo");
      },
      options);
}

// Ranks whose environments point at different tables still choose alike: rank 0's rules.
TEST(Tuner, EveryRankFollowsRankZerosTable) {
  const std::string ring =
      write_table("tune_ring.txt", "2 all_reduce ring 8:1\n2 all_reduce direct 8:9\n");
  const std::string direct =
      write_table("tune_direct.txt", "2 all_reduce ring 8:9\n2 all_reduce direct 8:1\n");
  run_processes(2, [&](int rank) {
    ::setenv("CHORUS_TUNE_FILE", rank == 0 ? ring.c_str() : direct.c_str(), 1);
    Communicator comm = Communicator::from_env();
    EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 64), "ring");
    std::vector<float> v(16, 1.0f), out(16);
    comm.all_reduce(v.data(), out.data(), v.size(), DataType::kF32, ReduceOp::kSum);
    EXPECT_EQ(out[7], 2.0f);
  });
}

// The same for the cost model: rank 0's constants choose on every rank, and explain() predicts
// by them (tree: 2 steps x 1 us + 3 x 0.5 MiB x 2 us per MiB = 5 us).
TEST(Tuner, EveryRankFollowsRankZerosCostModel) {
  const std::string tree = write_table("cost_tree.txt",
                                       "shm 2 all_reduce tree 0 1 2\n"
                                       "shm 2 all_reduce direct 0 50 50\n");
  const std::string direct = write_table("cost_direct.txt",
                                         "shm 2 all_reduce tree 0 50 50\n"
                                         "shm 2 all_reduce direct 0 1 2\n");
  run_processes(2, [&](int rank) {
    ::setenv("CHORUS_COST_FILE", rank == 0 ? tree.c_str() : direct.c_str(), 1);
    Communicator comm = Communicator::from_env();
    EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 64), "tree");
    for (const AlgorithmEstimate& e : comm.explain(Collective::kAllReduce, 1 << 19))
      if (e.algorithm == "tree") EXPECT_NEAR(e.predicted_us, 5.0, 1e-3);
    std::vector<float> v(16, 1.0f), out(16);
    comm.all_reduce(v.data(), out.data(), v.size(), DataType::kF32, ReduceOp::kSum);
    EXPECT_EQ(out[7], 2.0f);
  });
}

// Calls on device buffers that move by IPC are priced on the "ipc" lines (chorus-tune --device);
// where device buffers cannot exist (no GPU) or move by staging, as host buffers are. Here the
// host's constants say direct, the IPC path's tree.
TEST(Tuner, DeviceBuffersArePricedOnTheIpcPathWhereTheyMoveByIt) {
  const std::string cost = write_table("cost_ipc.txt",
                                       "shm 2 all_reduce tree 0 50 50\n"
                                       "shm 2 all_reduce direct 0 1 2\n"
                                       "ipc 2 all_reduce tree 0 1 2\n"
                                       "ipc 2 all_reduce direct 0 50 50\n");
  for (const char* path : {"auto", "staging"}) {
    SCOPED_TRACE(path);
    run_processes(2, [&](int) {
      ::setenv("CHORUS_COST_FILE", cost.c_str(), 1);
      ::setenv("CHORUS_GPU_PATH", path, 1);
      Communicator comm = Communicator::from_env();
      EXPECT_EQ(comm.priced_link(), "shm");
      EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 64), "direct");
      const bool ipc = gpu::probe_devices().count > 0 && std::string(path) == "auto";
      EXPECT_EQ(comm.priced_link(BufferMemory::kDevice), ipc ? "ipc" : "shm");
      EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 64, BufferMemory::kDevice),
                ipc ? "tree" : "direct");
      for (const AlgorithmEstimate& e :
           comm.explain(Collective::kAllReduce, 1 << 19, BufferMemory::kDevice))
        if (e.algorithm == "tree") EXPECT_NEAR(e.predicted_us, ipc ? 5.0 : 175.0, 1e-3);
    });
  }
}

// The selector chooses a broadcast by the table's in-place curves, and its root picks the path
// of its sends by the curves of its own placement. Here the in-place curves say `direct/fifo`,
// the out-of-place ones `direct` (single copy). A FIFO send of 256 KiB fits the FIFO
// (8 x 64 KiB slots) and finishes without its receiver; a single-copy one cannot finish until
// the receiver has read it. Rank 1 calls the first broadcast only once rank 0's has returned (a
// pipe outside the transport), so a root that went single copy would time out here; the second
// call, out of place, must wait for the receiver.
TEST(Tuner, TheRootOfABroadcastFollowsTheCurvesOfItsPlacement) {
  const std::string path = write_table("tune_in_place.txt",
                                       "2 broadcast direct 8:1 100000000:10\n"
                                       "2 broadcast direct/fifo 8:2 100000000:20\n"
                                       "2 broadcast/in-place direct 8:2 100000000:20\n"
                                       "2 broadcast/in-place direct/fifo 8:1 100000000:10\n");
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  testing::RunOptions options;
  options.env["CHORUS_TUNE_FILE"] = path;
  options.env["CHORUS_TIMEOUT"] = "20";
  testing::SharedBetweenRanks<std::atomic<bool>> no_single_copy;
  run_ranks(
      2,
      [&](Communicator& comm) {
        constexpr size_t kCount = 64 << 10;  // 256 KiB of int32
        bool single_copy = false;
        for (const AlgorithmEstimate& e : comm.explain(Collective::kBroadcast, kCount * 4))
          single_copy |= e.algorithm == "direct/fifo";
        if (!single_copy) {
          *no_single_copy = true;
          return;
        }
        ASSERT_EQ(comm.algorithm_for(Collective::kBroadcast, kCount * 4), "direct/fifo");
        std::vector<int32_t> buf(kCount), out(kCount);
        if (comm.rank() == 0) {
          ::close(go[0]);
          for (size_t i = 0; i < kCount; ++i) buf[i] = static_cast<int32_t>(i * 7 + 1);
          comm.broadcast(buf.data(), buf.data(), kCount, DataType::kI32, 0);  // in place
          char byte = 1;
          ASSERT_EQ(::write(go[1], &byte, 1), 1);
          // Out of place: single copy, by the out-of-place curves. The receiver is let go a little
          // later, and the call cannot have returned before.
          std::atomic<bool> released{false};
          std::thread release([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            released = true;
            ASSERT_EQ(::write(go[1], &byte, 1), 1);
          });
          comm.broadcast(buf.data(), out.data(), kCount, DataType::kI32, 0);
          EXPECT_TRUE(released) << "the out-of-place root's send finished without its receiver";
          release.join();
          EXPECT_EQ(out, buf);
          ::close(go[1]);
        } else {
          ::close(go[1]);
          for (int call = 0; call < 2; ++call) {
            // Bounded: this test's parent holds the pipe's write end too, so no EOF ends the wait.
            pollfd ready{go[0], POLLIN, 0};
            ASSERT_EQ(::poll(&ready, 1, 30000), 1) << "rank 0's broadcast did not return";
            char byte = 0;
            ASSERT_EQ(::read(go[0], &byte, 1), 1);
            std::fill(buf.begin(), buf.end(), -1);
            comm.broadcast(nullptr, buf.data(), kCount, DataType::kI32, 0);
            for (size_t i = 0; i < kCount; i += 997)
              ASSERT_EQ(buf[i], static_cast<int32_t>(i * 7 + 1));
            EXPECT_EQ(buf.back(), static_cast<int32_t>((kCount - 1) * 7 + 1));
          }
          ::close(go[0]);
        }
      },
      options);
  ::close(go[0]);
  ::close(go[1]);
  if (*no_single_copy)
    GTEST_SKIP() << "single copy is unavailable here: every send goes through the FIFO";
}

TEST(Tuner, OffMeansFixedThresholdsAndABadFileIsAClearError) {
  const std::string path = write_table("tune_off.txt", "2 all_reduce tree 8:1\n");
  testing::RunOptions off;
  off.env["CHORUS_TUNE_FILE"] = path;
  off.env["CHORUS_TUNE"] = "off";
  run_ranks(
      2,
      [](Communicator& comm) {
        EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 8), "direct");
      },
      off);

  const std::string bad = write_table("tune_bad.txt", "2 all_reduce ring 8:1\nnonsense\n");
  run_processes(1, [&](int) {
    ::setenv("CHORUS_TUNE_FILE", bad.c_str(), 1);
    algo::TuneTable t;
    try {
      t = algo::load_tune_table();
      ADD_FAILURE() << "a malformed table loaded";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("tune_bad.txt line 2"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace chorus
