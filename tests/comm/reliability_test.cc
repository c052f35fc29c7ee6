// Never hang, never corrupt: deadlines, failure propagation, mismatch detection, ranks that
// stop calling, duplicate ranks, and the flight recorder.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "chorus/communicator.h"
#include "error_helpers.h"
#include "flight_recorder.h"
#include "multiproc.h"

namespace chorus::testing {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The recorder's times are wall-clock microseconds (tools/chorus-fr lines up the ranks by them),
// though it stamps operations with a cheaper counter: every op's issued <= started <= ended, all
// inside the wall-clock window around the calls, and a 20 ms sleep shows as at least
// 20 ms.
TEST(Reliability, FlightRecorderTimesAreWallClockMicroseconds) {
  run_ranks(2, [](Communicator& comm) {
    auto wall_us = [] {
      return std::chrono::duration_cast<std::chrono::microseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
    float x = 1;
    const int64_t before = wall_us();
    comm.all_reduce(&x, &x, 1, DataType::kF32, ReduceOp::kSum);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    comm.all_reduce(&x, &x, 1, DataType::kF32, ReduceOp::kSum);
    const int64_t after = wall_us();
    const std::string json = comm.flight_recorder_json();
    std::vector<int64_t> t;  // issued, started, ended of each op, in order
    for (const char* key : {"\"issued_us\": ", "\"started_us\": ", "\"ended_us\": "}) {
      for (size_t at = json.find(key); at != std::string::npos; at = json.find(key, at + 1))
        t.push_back(std::stoll(json.substr(at + std::strlen(key))));
    }
    ASSERT_EQ(t.size(), 6u) << json;
    // t = {issued0, issued1, started0, started1, ended0, ended1}
    for (int op = 0; op < 2; ++op) {
      EXPECT_LE(t[op], t[2 + op]);
      EXPECT_LE(t[2 + op], t[4 + op]);
      EXPECT_GE(t[op], before - 1000) << json;
      EXPECT_LE(t[4 + op], after + 1000) << json;
    }
    EXPECT_GE(t[1] - t[4], 19000) << "the 20 ms sleep: " << json;
    EXPECT_LE(t[1] - t[4], 200000) << "the 20 ms sleep: " << json;
  });
}

// One op of a flight-recorder dump (each sits on its own line).
struct DumpedOp {
  int64_t seq = -1, issued = 0, started = 0, ended = 0;
  std::string state, line;
};

int64_t int_after(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\": ");
  return at == std::string::npos ? INT64_MIN : std::stoll(line.substr(at + key.size() + 4));
}

std::vector<DumpedOp> dumped_ops(const std::string& json) {
  std::vector<DumpedOp> ops;
  std::istringstream in(json);
  for (std::string line; std::getline(in, line);) {
    if (line.find("{\"seq\": ") == std::string::npos) continue;
    DumpedOp op;
    op.seq = int_after(line, "seq");
    op.issued = int_after(line, "issued_us");
    op.started = int_after(line, "started_us");
    op.ended = int_after(line, "ended_us");
    const size_t at = line.find("\"state\": \"") + 10;
    op.state = line.substr(at, line.find('"', at) - at);
    op.line = line;
    ops.push_back(op);
  }
  return ops;
}

// More operations in flight than the recorder has entries: it keeps the oldest unfinished ones
// (the one a hang is about, with the rank it waits for), counts the rest as unrecorded, and
// records again once entries are free.
TEST(Reliability, FlightRecorderKeepsTheOldestUnfinishedOperations) {
  RunOptions options;
  options.env["CHORUS_FR_ENTRIES"] = "3";  // rounded up to 4
  run_ranks(
      2,
      [](Communicator& comm) {
        std::vector<float> v(12, 1.0f);
        comm.set_algorithm("direct");
        for (int i = 0; i < 2; ++i)  // seq 0, 1: done
          comm.all_reduce(v.data(), v.data(), 1, DataType::kF32, ReduceOp::kSum);
        if (comm.rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1000));
        } else {
          std::vector<Work> works;
          for (int i = 0; i < 8; ++i)  // seq 2..9; 2..5 take the entries, 6..9 find them in flight
            works.push_back(comm.all_reduce_async(v.data() + i, v.data() + i, 1, DataType::kF32,
                                                  ReduceOp::kSum));
          std::string json;
          std::vector<DumpedOp> ops;
          for (auto until = Clock::now() + std::chrono::milliseconds(900); Clock::now() < until;) {
            json = comm.flight_recorder_json();
            ops = dumped_ops(json);
            if (!ops.empty() && ops[0].line.find("\"waiting_for\": [1]") != std::string::npos)
              break;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
          ASSERT_EQ(ops.size(), 4u) << json;
          for (int i = 0; i < 4; ++i) EXPECT_EQ(ops[i].seq, 2 + i) << json;
          EXPECT_EQ(ops[0].state, "running") << json;
          EXPECT_NE(ops[0].line.find("\"waiting_for\": [1]"), std::string::npos) << json;
          for (int i = 1; i < 4; ++i) EXPECT_EQ(ops[i].state, "queued") << json;
          EXPECT_NE(json.find("\"unrecorded\": 4"), std::string::npos) << json;
          EXPECT_NE(json.find("\"last_issued_seq\": 9"), std::string::npos) << json;
          for (Work& w : works) w.wait();
        }
        if (comm.rank() == 1)
          for (int i = 0; i < 8; ++i)
            comm.all_reduce(v.data() + i, v.data() + i, 1, DataType::kF32, ReduceOp::kSum);
        for (int i = 0; i < 8; ++i) EXPECT_EQ(v[i], i == 0 ? 8.0f : 2.0f) << i;
        comm.all_reduce(v.data(), v.data(), 1, DataType::kF32, ReduceOp::kSum);  // seq 10
        if (comm.rank() == 0) {
          const std::string json = comm.flight_recorder_json();
          const std::vector<DumpedOp> ops = dumped_ops(json);
          ASSERT_EQ(ops.size(), 4u) << json;
          const int64_t want[] = {3, 4, 5, 10};
          for (int i = 0; i < 4; ++i) {
            EXPECT_EQ(ops[i].seq, want[i]) << json;
            EXPECT_EQ(ops[i].state, "done") << json;
          }
        }
      },
      options);
}

// Dumps taken while operations are recorded see whole records: the recorder's writers take no
// lock, so a torn copy would show here as a record whose times, state or error do not fit
// together. One thread issues, another runs the operations (handed over as the progress thread
// gets them), a third dumps.
TEST(Reliability, FlightRecorderDumpsWhileOperationsRunAreConsistent) {
  FlightRecorder rec({"job", "w1", 0, 2}, 8);
  constexpr int kOps = 60000;
  std::vector<std::atomic<uint64_t>> handed(kOps);
  std::atomic<int> issued_count{0}, finished_count{0};
  std::atomic<bool> stop{false};
  std::thread runner([&] {
    for (int i = 0; i < kOps; ++i) {
      while (issued_count.load(std::memory_order_acquire) <= i) std::this_thread::yield();
      const uint64_t id = handed[i].load(std::memory_order_relaxed);
      rec.started(id);
      rec.finished(id, i % 97 == 0 ? "failed op " + std::to_string(i) : std::string());
      finished_count.store(i + 1, std::memory_order_release);
    }
  });
  std::string bad;
  int dumps = 0;
  std::thread reader([&] {
    while (!stop.load()) {
      const std::string json = rec.json("test");
      const std::vector<DumpedOp> ops = dumped_ops(json);
      for (size_t i = 0; i < ops.size() && bad.empty(); ++i) {
        const DumpedOp& op = ops[i];
        const bool has_error = op.line.find("\"error\"") != std::string::npos;
        const bool ok =
            (i == 0 || op.seq > ops[i - 1].seq) && op.issued > 0 &&
            (op.state == "queued"    ? op.started == 0 && op.ended == 0 && !has_error
             : op.state == "running" ? op.started >= op.issued && op.ended == 0 && !has_error
             : op.state == "done" ? op.started >= op.issued && op.ended >= op.started && !has_error
             : op.state == "failed"
                 ? op.seq % 97 == 0 && op.ended >= op.started &&
                       op.line.find("\"error\": \"failed op " + std::to_string(op.seq) + "\"") !=
                           std::string::npos
                 : false);
        if (!ok) bad = op.line;
      }
      ++dumps;
    }
  });
  for (int i = 0; i < kOps; ++i) {
    // At most 4 in flight: every operation finds a free entry.
    while (i - finished_count.load(std::memory_order_acquire) >= 4) std::this_thread::yield();
    FlightRecorder::Record r;
    r.seq = i;
    r.count = static_cast<size_t>(i);
    r.algorithm = "ring";
    handed[i].store(rec.issued(r), std::memory_order_relaxed);
    issued_count.store(i + 1, std::memory_order_release);
  }
  runner.join();
  stop.store(true);
  reader.join();
  EXPECT_TRUE(bad.empty()) << "inconsistent record: " << bad;
  EXPECT_GT(dumps, 0);
  const std::vector<DumpedOp> last = dumped_ops(rec.json("end"));
  ASSERT_EQ(last.size(), 8u);
  EXPECT_EQ(last.back().seq, kOps - 1);
}

TEST(Reliability, TimeoutNamesTheRankWaitedForAndBreaksTheCommunicator) {
  run_ranks(3, [](Communicator& comm) {
    float v[4] = {1, 1, 1, 1};
    comm.set_algorithm("direct");
    if (comm.rank() == 2) {
      // Arrives long after the others gave up: finds them failed, fails fast itself.
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      auto e = error_of([&] { comm.all_reduce(v, v, 4, DataType::kF32, ReduceOp::kSum); });
      ASSERT_TRUE(e);
      EXPECT_EQ(e->kind(), ErrorKind::kPeerFailure) << e->what();
      EXPECT_TRUE(contains(e->what(), "timeout")) << e->what();
      return;
    }
    comm.set_timeout(std::chrono::milliseconds(400));
    const auto start = Clock::now();
    auto e = error_of([&] { comm.all_reduce(v, v, 4, DataType::kF32, ReduceOp::kSum); });
    ASSERT_TRUE(e);
    EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1400));
    // Rank 0 may see rank 1's published timeout first, or time out itself: either names rank 2.
    EXPECT_TRUE(contains(e->what(), "rank 2")) << e->what();
    EXPECT_TRUE(contains(e->what(), "all_reduce")) << e->what();
    // Later calls fail fast.
    const auto t = Clock::now();
    auto later = error_of([&] { comm.barrier(); });
    ASSERT_TRUE(later);
    EXPECT_TRUE(contains(later->what(), "unusable")) << later->what();
    EXPECT_LT(Clock::now() - t, std::chrono::milliseconds(100));
  });
}

TEST(Reliability, KilledRankIsDetectedWithinTwoSeconds) {
  RunOptions options;
  options.may_fail = {3};
  run_ranks(
      4,
      [](Communicator& comm) {
        std::vector<float> v(1 << 16, 1.0f);
        comm.all_reduce(v.data(), v.data(), v.size(), DataType::kF32, ReduceOp::kSum);
        if (comm.rank() == 3) ::kill(::getpid(), SIGKILL);
        const auto start = Clock::now();
        auto e = error_of([&] {
          for (int i = 0; i < 100; ++i)
            comm.all_reduce(v.data(), v.data(), v.size(), DataType::kF32, ReduceOp::kSum);
        });
        ASSERT_TRUE(e);
        EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
        EXPECT_EQ(e->kind(), ErrorKind::kPeerFailure) << e->what();
        EXPECT_EQ(e->peer(), 3) << e->what();
        EXPECT_TRUE(contains(e->what(), "rank 3")) << e->what();
      },
      options);
}

TEST(Reliability, AbortReachesEveryRankAtOnceWithItsReason) {
  run_ranks(4, [](Communicator& comm) {
    std::vector<double> v(1000, 1.0);
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      comm.abort("data loader failed: disk full");
      auto e = error_of([&] { comm.barrier(); });
      ASSERT_TRUE(e);
      EXPECT_TRUE(contains(e->what(), "disk full")) << e->what();
      return;
    }
    const auto start = Clock::now();
    auto e = error_of(
        [&] { comm.all_reduce(v.data(), v.data(), v.size(), DataType::kF64, ReduceOp::kSum); });
    ASSERT_TRUE(e);
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
    EXPECT_EQ(e->peer(), 1) << e->what();
    EXPECT_TRUE(contains(e->what(), "disk full")) << e->what();
  });
}

// Each pair of mismatched calls fails on the receiving rank with both calls spelled out, and on
// the other rank at its next operation at the latest.
struct MismatchCase {
  const char* name;
  std::function<void(Communicator&)> rank0, rank1;
  const char* mine;    // as rank 0 sees its own call
  const char* theirs;  // as rank 0 sees rank 1's call
  const char* why = "every rank must issue the same collectives in the same order";
};

TEST(Reliability, MismatchedCallsFailOnBothSidesNamingBoth) {
  static float a[256], b[256];
  const std::vector<MismatchCase> cases = {
      {"different collectives",
       [](Communicator& c) { c.all_reduce(a, b, 100, DataType::kF32, ReduceOp::kSum); },
       [](Communicator& c) { c.broadcast(a, b, 100, DataType::kF32, 1); },
       "all_reduce #0 (count 100, float, sum, direct algorithm)",
       "broadcast #0 (count 100, float, root 1, direct algorithm)"},
      {"different counts",
       [](Communicator& c) { c.all_reduce(a, b, 100, DataType::kF32, ReduceOp::kSum); },
       [](Communicator& c) { c.all_reduce(a, b, 101, DataType::kF32, ReduceOp::kSum); },
       "count 100", "count 101"},
      {"different small counts",  // messages of 8 and 12 bytes: the smallest path
       [](Communicator& c) { c.all_reduce(a, b, 2, DataType::kF32, ReduceOp::kSum); },
       [](Communicator& c) { c.all_reduce(a, b, 3, DataType::kF32, ReduceOp::kSum); }, "count 2",
       "count 3"},
      {"different dtypes",
       [](Communicator& c) { c.all_reduce(a, b, 64, DataType::kF32, ReduceOp::kSum); },
       [](Communicator& c) { c.all_reduce(a, b, 64, DataType::kI32, ReduceOp::kSum); }, "float",
       "int32"},
      {"different ops",
       [](Communicator& c) { c.all_reduce(a, b, 64, DataType::kF32, ReduceOp::kSum); },
       [](Communicator& c) { c.all_reduce(a, b, 64, DataType::kF32, ReduceOp::kMax); }, "sum",
       "max"},
      {"different roots",
       [](Communicator& c) { c.reduce(a, b, 64, DataType::kF32, ReduceOp::kSum, 0); },
       [](Communicator& c) { c.reduce(a, b, 64, DataType::kF32, ReduceOp::kSum, 1); }, "root 0",
       "root 1"},
      // Same call, but one rank forced another algorithm (e.g. CHORUS_ALGO set on one rank
      // only): messages of equal size would otherwise be combined as if they meant the same.
      {"different algorithms",
       [](Communicator& c) { c.all_reduce(a, b, 64, DataType::kF32, ReduceOp::kSum); },
       [](Communicator& c) {
         c.set_algorithm("ring");
         c.all_reduce(a, b, 64, DataType::kF32, ReduceOp::kSum);
       },
       "direct algorithm", "ring algorithm", "the same call with another algorithm"},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    RunOptions options;
    options.env["CHORUS_TIMEOUT"] = "5";
    run_ranks(
        2,
        [&](Communicator& comm) {
          comm.set_algorithm("direct");
          auto e = error_of([&] {
            (comm.rank() == 0 ? k.rank0 : k.rank1)(comm);
            comm.barrier();  // the side that did not receive learns at its next operation
          });
          ASSERT_TRUE(e);
          EXPECT_TRUE(e->kind() == ErrorKind::kMismatch || e->kind() == ErrorKind::kPeerFailure)
              << e->what();
          EXPECT_TRUE(contains(e->what(), k.mine)) << e->what();
          EXPECT_TRUE(contains(e->what(), k.theirs)) << e->what();
          EXPECT_TRUE(contains(e->what(), k.why)) << e->what();
        },
        options);
  }
}

TEST(Reliability, RankThatStopsCallingIsNamed) {
  run_ranks(3, [](Communicator& comm) {
    std::vector<int32_t> v(1000, 1);
    // Uneven data: rank 2 has 5 batches, the others 10.
    const int batches = comm.rank() == 2 ? 5 : 10;
    const auto start = Clock::now();
    std::optional<Error> e;
    try {
      for (int i = 0; i < batches; ++i)
        comm.all_reduce(v.data(), v.data(), v.size(), DataType::kI32, ReduceOp::kMax);
    } catch (const Error& err) {
      e = err;
    }
    if (comm.rank() == 2) {
      EXPECT_FALSE(e) << e->what();
      return;  // leaves the communicator here
    }
    ASSERT_TRUE(e);
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
    EXPECT_TRUE(contains(e->what(), "rank 2 left the communicator after 5 operations"))
        << e->what();
  });
}

// A group made by split() names every rank its errors mention by the group and the world rank,
// its own included: world rank 3 waiting in a group for world rank 1 must not say "rank 0".
// Groups of 4 ranks by parity: world ranks 1 and 3 are ranks 0 and 1 of "tp group 1".
TEST(Reliability, AGroupsErrorsNameItsRanksByGroupAndWorldRank) {
  run_ranks(4, [](Communicator& comm) {
    const int r = comm.rank();
    std::optional<Communicator> tp = comm.split(r % 2, r, "tp group " + std::to_string(r % 2));
    ASSERT_TRUE(tp.has_value());
    EXPECT_EQ(tp->group_name(), "tp group " + std::to_string(r % 2));
    EXPECT_EQ(tp->world_rank(0), r % 2);
    EXPECT_EQ(tp->world_rank(1), r % 2 + 2);
    EXPECT_EQ(comm.group_name(), "");
    EXPECT_EQ(comm.world_rank(3), 3);
    std::optional<Communicator> unnamed = comm.split(r % 2, r);
    EXPECT_EQ(unnamed->group_name(), "split group " + std::to_string(r % 2));
    float v[4] = {1, 1, 1, 1};
    if (r % 2 == 0) {  // group 0 works
      tp->all_reduce(v, v, 4, DataType::kF32, ReduceOp::kSum);
      EXPECT_EQ(v[0], 2.0f);
      return;
    }
    const std::string me =
        r == 1 ? "rank 0 of tp group 1 (world rank 1)" : "rank 1 of tp group 1 (world rank 3)";
    const std::string peer =
        r == 1 ? "rank 1 of tp group 1 (world rank 3)" : "rank 0 of tp group 1 (world rank 1)";
    // A mismatch: both sides name both ranks.
    tp->set_algorithm("direct");
    auto e = error_of([&] {
      if (r == 1)
        tp->all_reduce(v, v, 4, DataType::kF32, ReduceOp::kSum);
      else
        tp->broadcast(v, v, 4, DataType::kF32, 1);
      tp->barrier();
    });
    ASSERT_TRUE(e);
    EXPECT_TRUE(contains(e->what(), "[" + me + ", ")) << e->what();
    EXPECT_TRUE(contains(e->what(), peer)) << e->what();
    EXPECT_EQ(e->rank_label(), me);
    // A timeout in the default-named group: world rank 3 waits for world rank 1, which never calls.
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return;
    }
    unnamed->set_timeout(std::chrono::milliseconds(400));
    auto t = error_of([&] { unnamed->recv(v, 4, DataType::kF32, 0); });
    ASSERT_TRUE(t);
    EXPECT_EQ(t->kind(), ErrorKind::kTimeout) << t->what();
    EXPECT_TRUE(contains(t->what(), "[rank 1 of split group 1 (world rank 3), recv #0]"))
        << t->what();
    EXPECT_TRUE(contains(t->what(), "still waiting for rank 0 of split group 1 (world rank 1)"))
        << t->what();
  });
}

TEST(Reliability, TwoProcessesClaimingOneRankAreRejected) {
  const fs::path dir = fresh_dir("chorus-duprank");
  RunOptions options;
  options.env["CHORUS_TIMEOUT"] = "2";
  run_processes(
      3,
      [&](int rank) {
        if (rank == 2) setenv("CHORUS_RANK", "1", 1);  // a second "rank 1"
        std::string outcome = "ok";
        try {
          Communicator comm = Communicator::from_env();
          comm.barrier();
        } catch (const Error& e) {
          outcome = e.what();
        }
        std::ofstream(dir / ("outcome-" + std::to_string(rank))) << outcome;
      },
      options);
  std::string all;
  for (int r = 0; r < 3; ++r) {
    std::ifstream in(dir / ("outcome-" + std::to_string(r)));
    all += std::string(std::istreambuf_iterator<char>(in), {}) + "\n";
  }
  EXPECT_TRUE(contains(all, "two processes claim rank 1")) << all;
  EXPECT_FALSE(contains(all, "ok\n")) << all;
  fs::remove_all(dir);
}

TEST(Reliability, InconsistentWorldSizeIsRejected) {
  RunOptions options;
  options.env["CHORUS_TIMEOUT"] = "2";
  run_processes(
      2,
      [&](int rank) {
        if (rank == 1)
          setenv("CHORUS_WORLD_SIZE", "3", 1), setenv("CHORUS_LOCAL_WORLD_SIZE", "3", 1);
        auto e = error_of([] { Communicator::from_env(); });
        ASSERT_TRUE(e);
        // Rank 0 learns it from rank 1's report, at once.
        EXPECT_TRUE(contains(e->what(), "world size 3 but rank 0 with 2")) << e->what();
        if (rank == 0) EXPECT_TRUE(contains(e->what(), "rank 1 failed to set up")) << e->what();
      },
      options);
}

TEST(Reliability, FlightRecorderDumpsOnFailureAndTheMergeToolNamesWhoWaits) {
  const fs::path dir = fresh_dir("chorus-fr");
  RunOptions options;
  options.env["CHORUS_FR_DIR"] = dir.string();
  options.env["CHORUS_TIMEOUT"] = "0.5";
  run_ranks(
      3,
      [](Communicator& comm) {
        std::vector<float> v(100, 1.0f);
        for (int i = 0; i < 3; ++i)
          comm.all_reduce(v.data(), v.data(), v.size(), DataType::kF32, ReduceOp::kSum);
        if (comm.rank() == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          return;  // never joins the 4th all_reduce while the others wait
        }
        EXPECT_THROW(comm.all_reduce(v.data(), v.data(), v.size(), DataType::kF32, ReduceOp::kSum),
                     Error);
        // On demand, too.
        EXPECT_TRUE(contains(comm.flight_recorder_json(), "\"state\": \"failed\""));
      },
      options);
  size_t dumps = 0;
  for (const auto& f : fs::directory_iterator(dir))
    dumps += f.path().filename().string().starts_with("chorus-fr-");
  EXPECT_GE(dumps, 2u);
  const std::string cmd =
      std::string(CHORUS_SOURCE_DIR) + "/tools/chorus-fr " + dir.string() + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << out;
  EXPECT_TRUE(contains(out, "waits in all_reduce #3")) << out;
  EXPECT_TRUE(contains(out, "rank(s) 2") || contains(out, "rank(s) 1, 2") ||
              contains(out, "rank(s) 2, 1") || contains(out, "no dump from rank(s) 2"))
      << out;
  fs::remove_all(dir);
}

TEST(Reliability, SignalDumpsEveryLiveCommunicator) {
  const fs::path dir = fresh_dir("chorus-fr-signal");
  RunOptions options;
  options.env["CHORUS_FR_DIR"] = dir.string();
  options.env["CHORUS_FR_SIGNAL"] = std::to_string(SIGUSR1);
  run_ranks(
      2,
      [&](Communicator& comm) {
        comm.barrier();
        ::raise(SIGUSR1);
        const fs::path mine = dir / ("chorus-fr-" + std::string(std::getenv("CHORUS_JOB_ID")) +
                                     "-w1-r" + std::to_string(comm.rank()) + ".json");
        for (int i = 0; i < 200 && !fs::exists(mine); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        std::ifstream in(mine);
        const std::string text(std::istreambuf_iterator<char>(in), {});
        EXPECT_TRUE(contains(text, "\"reason\": \"signal\"")) << mine << ": " << text;
        EXPECT_TRUE(contains(text, "\"coll\": \"barrier\"")) << text;
        comm.barrier();
      },
      options);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace chorus::testing

namespace chorus::testing {
namespace {

// kill -9 in the middle of a large (single-copy) all-reduce and of a barrier.
TEST(Reliability, KilledRankInTheMiddleOfLargeAllReduceAndBarrierIsNamed) {
  for (bool barrier : {false, true}) {
    SCOPED_TRACE(barrier ? "barrier" : "large all_reduce");
    RunOptions options;
    options.may_fail = {2};
    run_ranks(
        4,
        [&](Communicator& comm) {
          std::vector<float> v(barrier ? 1 : 4 << 20, 1.0f);
          if (comm.rank() == 2) {
            std::thread([] {
              std::this_thread::sleep_for(std::chrono::milliseconds(150));
              ::kill(::getpid(), SIGKILL);
            }).detach();
          }
          std::optional<Error> e;
          Clock::time_point failed_at;
          try {
            for (int i = 0; i < 100000; ++i) {
              if (barrier)
                comm.barrier();
              else
                comm.all_reduce(v.data(), v.data(), v.size(), DataType::kF32, ReduceOp::kMax);
            }
          } catch (const Error& err) {
            e = err;
            failed_at = Clock::now();
          }
          ASSERT_TRUE(e) << "the loop outlived the killed rank";
          EXPECT_EQ(e->peer(), 2) << e->what();
          EXPECT_TRUE(contains(e->what(), "rank 2")) << e->what();
          EXPECT_TRUE(e->kind() == ErrorKind::kPeerFailure) << e->what();
        },
        options);
  }
}

TEST(Reliability, RankThatSkipsACallIsCaught) {
  // Skipping a call with another signature: the next call does not match.
  run_ranks(3, [](Communicator& comm) {
    std::vector<float> a(100, 1.0f), b(200, 1.0f);
    auto e = error_of([&] {
      if (comm.rank() != 1)
        comm.all_reduce(a.data(), a.data(), 100, DataType::kF32, ReduceOp::kSum);
      comm.all_reduce(b.data(), b.data(), 200, DataType::kF32, ReduceOp::kSum);
      comm.barrier();
    });
    ASSERT_TRUE(e);
    EXPECT_TRUE(contains(e->what(), "count 100") && contains(e->what(), "count 200")) << e->what();
  });
  // Skipping a call with the same signature: the rank runs out of calls first and is named.
  run_ranks(3, [](Communicator& comm) {
    std::vector<float> a(100, 1.0f);
    const int calls = comm.rank() == 1 ? 1 : 2;
    std::optional<Error> e;
    try {
      for (int i = 0; i < calls; ++i)
        comm.all_reduce(a.data(), a.data(), 100, DataType::kF32, ReduceOp::kSum);
    } catch (const Error& err) {
      e = err;
    }
    if (comm.rank() == 1) return;
    ASSERT_TRUE(e);
    EXPECT_TRUE(contains(e->what(), "rank 1 left the communicator after 1 operations"))
        << e->what();
  });
}

TEST(Reliability, RankThatRaisesIsNamedByTheOthers) {
  run_processes(3, [](int rank) {
    try {
      Communicator comm = Communicator::from_env();
      std::vector<int64_t> v(1000, 1);
      const auto start = Clock::now();
      for (int step = 0; step < 10; ++step) {
        if (rank == 0 && step == 3) throw std::runtime_error("loss is NaN");
        try {
          comm.all_reduce(v.data(), v.data(), v.size(), DataType::kI64, ReduceOp::kMax);
        } catch (const Error& e) {
          EXPECT_NE(rank, 0);
          EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
          EXPECT_EQ(e.peer(), 0) << e.what();
          EXPECT_TRUE(contains(e.what(), "rank 0 destroyed the communicator while an exception"))
              << e.what();
          return;
        }
      }
      ADD_FAILURE() << "rank " << rank << " finished its loop";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(rank, 0);
      EXPECT_STREQ(e.what(), "loss is NaN");
    }
  });
}

TEST(Reliability, RankThatNeverStartsIsNamedAtSetUp) {
  RunOptions options;
  options.env["CHORUS_TIMEOUT"] = "1";
  const auto start = Clock::now();
  run_processes(
      3,
      [](int rank) {
        if (rank == 2) return;  // never creates its communicator
        auto e = error_of([] { Communicator::from_env(); });
        ASSERT_TRUE(e);
        EXPECT_EQ(e->kind(), ErrorKind::kTimeout) << e->what();
        EXPECT_TRUE(contains(e->what(), "rank 2 did not join")) << e->what();
      },
      options);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace chorus::testing

namespace chorus::testing {
namespace {

// A /dev/shm too small for the FIFOs: a clear message with the size and the docker flag, at
// once. (tmpfs refuses an allocation larger than the whole file system before touching memory.)
TEST(Reliability, TooSmallDevShmSaysHowMuchIsNeeded) {
  RunOptions options;
  options.env["CHORUS_SHM_SLOT_BYTES"] = "1G";
  options.env["CHORUS_SHM_DEPTH"] = "1024";
  options.env["CHORUS_TIMEOUT"] = "5";
  run_processes(
      2,
      [](int) {
        auto e = error_of([] { Communicator::from_env(); });
        ASSERT_TRUE(e);
        EXPECT_TRUE(contains(e->what(), "--shm-size")) << e->what();
        EXPECT_TRUE(contains(e->what(), "MiB")) << e->what();
      },
      options);
}

}  // namespace
}  // namespace chorus::testing
