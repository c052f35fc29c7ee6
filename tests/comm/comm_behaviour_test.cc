// Communicator behaviour beyond single-call correctness: async ordering, split, point-to-point,
// barriers, argument errors, float accuracy against a double reference, shm hygiene.
#include <dirent.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "chorus/half.h"
#include "collective_cases.h"
#include "multiproc.h"
#include "reference.h"

namespace chorus::testing {
namespace {

std::vector<std::string> shm_entries_of(const std::string& job) {
  std::vector<std::string> found;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, ("chorus-" + job + "-").c_str(), 8 + job.size()) == 0)
        found.push_back(e->d_name);
    closedir(d);
  }
  return found;
}

TEST(CommBehaviour, ThousandMixedAsyncOperationsCompleteInOrder) {
  run_ranks(4, [](Communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    constexpr int kOps = 1000;
    std::vector<std::vector<int32_t>> bufs(kOps);
    std::vector<Work> works;
    for (int k = 0; k < kOps; ++k) {
      const size_t count = 1 + (k * 37) % 300;
      switch (k % 5) {
        case 0:  // all_reduce sum in place
          bufs[k].assign(count, r + k);
          works.push_back(comm.all_reduce_async(bufs[k].data(), bufs[k].data(), count,
                                                DataType::kI32, ReduceOp::kSum));
          break;
        case 1:  // broadcast from a rotating root
          bufs[k].assign(count, r == k % n ? k : -1);
          works.push_back(
              comm.broadcast_async(bufs[k].data(), bufs[k].data(), count, DataType::kI32, k % n));
          break;
        case 2:  // all_gather in place
          bufs[k].assign(count * n, -1);
          for (size_t i = 0; i < count; ++i) bufs[k][r * count + i] = r * 1000 + k;
          works.push_back(comm.all_gather_async(bufs[k].data() + r * count, bufs[k].data(), count,
                                                DataType::kI32));
          break;
        case 3:  // the same buffer updated by two consecutive ops: order matters
          bufs[k].assign(count, 1);
          works.push_back(comm.all_reduce_async(bufs[k].data(), bufs[k].data(), count,
                                                DataType::kI32, ReduceOp::kSum));
          works.push_back(comm.all_reduce_async(bufs[k].data(), bufs[k].data(), count,
                                                DataType::kI32, ReduceOp::kSum));
          break;
        default:
          works.push_back(comm.barrier_async());
      }
    }
    for (auto& w : works) w.wait();
    for (int k = 0; k < kOps; ++k) {
      const size_t count = 1 + (k * 37) % 300;
      for (size_t i = 0; i < bufs[k].size(); ++i) {
        int32_t want = 0;
        switch (k % 5) {
          case 0:
            want = n * k + n * (n - 1) / 2;
            break;
          case 1:
            want = k;
            break;
          case 2:
            want = static_cast<int32_t>(i / count) * 1000 + k;
            break;
          case 3:
            want = n * n;
            break;
          default:
            continue;
        }
        ASSERT_EQ(bufs[k][i], want) << "op " << k << " element " << i;
      }
    }
  });
}

// The direct algorithms' small-message path (Exchange::exchange_small) sends a whole message at
// once and polls for arrivals, falling back to queued requests when a FIFO is full or a peer is
// late. With two slots per FIFO, roots run ahead of a rank that starts late (broadcast) and
// senders ahead of a late root (reduce) until their FIFOs fill; then every direct collective
// runs with one rank late by turns. Sizes cover inline (up to 16 bytes), one-slot and multi-slot
// messages.
TEST(CommBehaviour, SmallDirectCallsFallBackWhenFifosFillOrPeersAreLate) {
  RunOptions options;
  options.env = {
      {"CHORUS_ALGO", "direct"}, {"CHORUS_SHM_DEPTH", "2"}, {"CHORUS_SHM_SLOT_BYTES", "1024"}};
  run_ranks(
      3,
      [](Communicator& comm) {
        const int n = comm.size(), r = comm.rank();
        auto late = [&](int who, int ms) {
          if (r == who) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        };
        auto count_of = [](int k) { return size_t{1} + static_cast<size_t>(k * 37) % 700; };
        constexpr int kRooted = 24;
        std::vector<std::vector<int32_t>> bufs(kRooted);
        late(2, 300);
        for (int k = 0; k < kRooted; ++k) {
          bufs[k].assign(count_of(k), r == 0 ? 10 * k : -1);
          comm.broadcast(bufs[k].data(), bufs[k].data(), bufs[k].size(), DataType::kI32, 0);
        }
        for (int k = 0; k < kRooted; ++k)
          for (int32_t v : bufs[k]) ASSERT_EQ(v, 10 * k) << "broadcast " << k;
        late(2, 300);
        for (int k = 0; k < kRooted; ++k) {
          std::vector<int32_t> in(count_of(k), r + k);
          bufs[k].assign(in.size(), -1);
          comm.reduce(in.data(), bufs[k].data(), in.size(), DataType::kI32, ReduceOp::kSum, 2);
        }
        if (r == 2)
          for (int k = 0; k < kRooted; ++k)
            for (int32_t v : bufs[k]) ASSERT_EQ(v, n * k + n * (n - 1) / 2) << "reduce " << k;
        for (int k = 0; k < 90; ++k) {
          late(k % n, k % 4 == 0 ? 20 : 0);
          const size_t count = count_of(k);
          std::vector<int32_t> in(count * n), out(count * n, -1);
          for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(r * 100000 + i + k);
          const int root = k % n;
          switch (k % 6) {
            case 0:
              comm.all_reduce(in.data(), out.data(), count, DataType::kI32, ReduceOp::kSum);
              for (size_t i = 0; i < count; ++i)
                ASSERT_EQ(out[i], static_cast<int32_t>(100000 * n * (n - 1) / 2 + n * (i + k)))
                    << "all_reduce " << k << " element " << i;
              break;
            case 1:
              comm.all_gather(in.data(), out.data(), count, DataType::kI32);
              for (size_t i = 0; i < count * n; ++i)
                ASSERT_EQ(out[i], static_cast<int32_t>(i / count * 100000 + i % count + k))
                    << "all_gather " << k << " element " << i;
              break;
            case 2:
              comm.reduce_scatter(in.data(), out.data(), count, DataType::kI32, ReduceOp::kSum);
              for (size_t i = 0; i < count; ++i)
                ASSERT_EQ(out[i],
                          static_cast<int32_t>(100000 * n * (n - 1) / 2 + n * (r * count + i + k)))
                    << "reduce_scatter " << k << " element " << i;
              break;
            case 3:  // rank q's first `count` elements to block q of the root's output
              comm.gather(in.data(), out.data(), count, DataType::kI32, root);
              if (r == root)
                for (size_t i = 0; i < count * n; ++i)
                  ASSERT_EQ(out[i], static_cast<int32_t>(i / count * 100000 + i % count + k))
                      << "gather " << k << " element " << i;
              break;
            case 4:  // block q of the root's input to rank q
              comm.scatter(in.data(), out.data(), count, DataType::kI32, root);
              for (size_t i = 0; i < count; ++i)
                ASSERT_EQ(out[i], static_cast<int32_t>(root * 100000 + r * count + i + k))
                    << "scatter " << k << " element " << i;
              break;
            default:  // block q of rank p's input to block p of rank q's output
              comm.all_to_all(in.data(), out.data(), count, DataType::kI32);
              for (size_t i = 0; i < count * n; ++i)
                ASSERT_EQ(out[i],
                          static_cast<int32_t>(i / count * 100000 + r * count + i % count + k))
                    << "all_to_all " << k << " element " << i;
          }
        }
      },
      options);
}

// A blocking call runs on the caller's thread only when nothing issued before it is queued or
// running; otherwise it waits its turn. Each round queues 0-3 in-place sums of `buf` and then
// reads `buf` with a blocking call: running early would read a stale value. A second thread
// calls synchronize() all along (it must neither hang nor let a call jump the queue).
TEST(CommBehaviour, BlockingCallsWaitForEarlierAsyncOnes) {
  run_ranks(3, [](Communicator& comm) {
    const int64_t n = comm.size();
    std::atomic<bool> stop{false};
    std::thread syncer([&] {
      while (!stop.load()) comm.synchronize();
    });
    for (int round = 0; round < 3000; ++round) {
      const int queued = round % 4;
      int64_t buf = 1, out = 0;
      std::vector<Work> works;
      for (int k = 0; k < queued; ++k)
        works.push_back(comm.all_reduce_async(&buf, &buf, 1, DataType::kI64, ReduceOp::kSum));
      comm.all_reduce(&buf, &out, 1, DataType::kI64, ReduceOp::kSum);
      int64_t want = n;
      for (int k = 0; k < queued; ++k) want *= n;
      for (auto& w : works) EXPECT_TRUE(w.test()) << "round " << round;
      ASSERT_EQ(out, want) << "round " << round << " with " << queued << " queued before it";
    }
    stop.store(true);
    syncer.join();
  });
}

TEST(CommBehaviour, SplitGroupsRunAtOnceAndOrderByKey) {
  run_ranks(5, [](Communicator& comm) {
    const int r = comm.rank();
    // Colours: even / odd ranks; keys reverse the order inside each group.
    std::optional<Communicator> sub = comm.split(r % 2, -r);
    ASSERT_TRUE(sub.has_value());
    const int group = r % 2 == 0 ? 3 : 2;  // 0,2,4 and 1,3
    ASSERT_EQ(sub->size(), group);
    const int expected_rank = r % 2 == 0 ? (4 - r) / 2 : (3 - r) / 2;
    EXPECT_EQ(sub->rank(), expected_rank);
    // Sub-communicator and parent operations in flight at the same time.
    std::vector<int64_t> a(1 << 16, r), b(1 << 16, r);
    Work w_sub =
        sub->all_reduce_async(a.data(), a.data(), a.size(), DataType::kI64, ReduceOp::kSum);
    Work w_all =
        comm.all_reduce_async(b.data(), b.data(), b.size(), DataType::kI64, ReduceOp::kSum);
    w_sub.wait();
    w_all.wait();
    const int64_t group_sum = r % 2 == 0 ? 0 + 2 + 4 : 1 + 3;
    EXPECT_EQ(a.front(), group_sum);
    EXPECT_EQ(a.back(), group_sum);
    EXPECT_EQ(b.front(), 10);
    // Every collective works on the sub-communicator.
    Case k{Collective::kReduceScatter, "ring", DataType::kBF16, ReduceOp::kMax, 1000, false, 0, 7};
    run_and_check(*sub, k);
    // A split of a split, and ranks that opt out.
    std::optional<Communicator> none = sub->split(sub->rank() == 0 ? kNoColor : 0, 0);
    EXPECT_EQ(none.has_value(), sub->rank() != 0);
    if (none) {
      int32_t v = 1;
      none->all_reduce(&v, &v, 1, DataType::kI32, ReduceOp::kSum);
      EXPECT_EQ(v, group - 1);
    }
  });
}

TEST(CommBehaviour, PointToPointRingAndLargeBlockingPairs) {
  run_ranks(3, [](Communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
      std::vector<float> out(count), in(count, -1.0f);
      for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(r * 7 + i % 101);
      comm.send_recv(out.data(), count, (r + 1) % n, in.data(), count, (r + n - 1) % n,
                     DataType::kF32);
      const int from = (r + n - 1) % n;
      for (size_t i = 0; i < count; i += 97)
        ASSERT_EQ(in[i], static_cast<float>(from * 7 + i % 101));
    }
    // Blocking pairs: 0 sends then receives, 1 receives then sends (single-copy sizes too).
    std::vector<double> buf(1 << 19, r);
    if (r == 0) {
      comm.send(buf.data(), buf.size(), DataType::kF64, 1);
      comm.recv(buf.data(), buf.size(), DataType::kF64, 1);
      EXPECT_EQ(buf[12345], 1.0);
    } else if (r == 1) {
      comm.recv(buf.data(), buf.size(), DataType::kF64, 0);
      EXPECT_EQ(buf[777], 0.0);
      std::fill(buf.begin(), buf.end(), 1.0);
      comm.send(buf.data(), buf.size(), DataType::kF64, 0);
    }
  });
}

TEST(CommBehaviour, BarrierHoldsEveryRankUntilTheLastArrives) {
  run_ranks(4, [](Communicator& comm) {
    auto now_us = [] {
      timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
    };
    std::this_thread::sleep_for(std::chrono::milliseconds(30 * comm.rank()));
    int64_t times[2] = {now_us(), 0};
    comm.barrier();
    times[1] = now_us();
    std::vector<int64_t> all(2 * comm.size());
    comm.all_gather(times, all.data(), 2, DataType::kI64);
    int64_t last_arrival = 0;
    for (int p = 0; p < comm.size(); ++p) last_arrival = std::max(last_arrival, all[2 * p]);
    for (int p = 0; p < comm.size(); ++p) EXPECT_GE(all[2 * p + 1], last_arrival) << "rank " << p;
  });
}

// Random floats reduced by every algorithm: close to the double-precision sum, and bit-identical
// on every rank.
TEST(CommBehaviour, FloatSumsMatchDoubleReferenceAndAgreeAcrossRanks) {
  run_ranks(5, [](Communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    const size_t count = 100003;
    for (DataType dtype : {DataType::kF32, DataType::kF64, DataType::kF16, DataType::kBF16}) {
      for (const char* algo : {"ring", "tree", "direct"}) {
        comm.set_algorithm(algo);
        const size_t es = dtype_size(dtype);
        std::vector<std::byte> buf(count * es);
        auto value = [](int rank, size_t i) {  // splitmix64 of (rank, i) -> [-1, 1)
          uint64_t z = (static_cast<uint64_t>(rank) << 40) + i + 0x9e3779b97f4a7c15ull;
          z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
          z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
          z ^= z >> 31;
          return static_cast<double>(z >> 11) * 0x1p-52 - 1.0;
        };
        for (size_t i = 0; i < count; ++i) store_double(dtype, buf.data(), i, value(r, i));
        comm.all_reduce(buf.data(), buf.data(), count, dtype, ReduceOp::kSum);
        // Each rank's input as the reference sees it (rounded to the dtype first).
        const double eps = dtype == DataType::kF64   ? 0x1p-52
                           : dtype == DataType::kF32 ? 0x1p-23
                           : dtype == DataType::kF16 ? 0x1p-10
                                                     : 0x1p-7;
        size_t bad = 0;
        for (size_t i = 0; i < count; i += 7) {
          double want = 0, magnitude = 0;
          std::vector<std::byte> one(es);
          for (int p = 0; p < n; ++p) {
            store_double(dtype, one.data(), 0, value(p, i));
            want += load(dtype, one.data(), 0);
            magnitude += std::fabs(load(dtype, one.data(), 0));
          }
          if (std::fabs(load(dtype, buf.data(), i) - want) > 2 * n * eps * magnitude + 1e-300)
            ++bad;
        }
        EXPECT_EQ(bad, 0u) << to_string(dtype) << " " << algo;
        // Bitwise agreement: gather everyone's result and compare with ours.
        std::vector<std::byte> all(count * es * n);
        comm.set_algorithm("auto");
        comm.all_gather(buf.data(), all.data(), count * es, DataType::kU8);
        for (int p = 0; p < n; ++p)
          EXPECT_EQ(std::memcmp(all.data() + p * count * es, buf.data(), count * es), 0)
              << to_string(dtype) << " " << algo << ": rank " << p << " differs from rank " << r;
      }
    }
  });
}

void expect_invalid(const std::function<void()>& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(CommBehaviour, BadArgumentsRaiseInvalidArgumentNamingTheArgument) {
  run_ranks(2, [](Communicator& comm) {
    float x[4] = {1, 2, 3, 4}, y[8] = {};
    const auto f32 = DataType::kF32;
    const auto sum = ReduceOp::kSum;
    expect_invalid([&] { comm.all_reduce(nullptr, y, 4, f32, sum); }, "send is null");
    expect_invalid([&] { comm.all_reduce(x, nullptr, 4, f32, sum); }, "recv is null");
    expect_invalid([&] { comm.broadcast(x, x, 4, f32, 2); }, "root 2 is out of range");
    expect_invalid([&] { comm.reduce(x, y, 4, f32, sum, -1); }, "root -1 is out of range");
    expect_invalid([&] { comm.all_reduce(x, y, 4, static_cast<DataType>(42), sum); },
                   "unknown dtype");
    expect_invalid([&] { comm.all_reduce(x, y, 4, f32, static_cast<ReduceOp>(9)); }, "unknown op");
    expect_invalid([&] { comm.send(x, 4, f32, 5); }, "peer 5 is out of range");
    expect_invalid([&] { comm.recv(x, 4, f32, comm.rank()); }, "no message sent to self");
    expect_invalid([&] { comm.all_gather(x, y, SIZE_MAX / 2, f32); }, "overflows");
    expect_invalid([&] { comm.all_reduce(x, y, SIZE_MAX / 3, DataType::kF64, sum); }, "overflows");
    expect_invalid([&] { comm.all_reduce(y, y + 1, 4, f32, sum); }, "overlap");
    expect_invalid([&] { comm.all_to_all(y, y, 4, f32); }, "overlap");
    expect_invalid([&] { comm.set_algorithm("bogus"); }, "unknown algorithm 'bogus'");
    expect_invalid([&] { comm.split(-7, 0); }, "color -7");
    // Nothing above reached a peer: the communicator still works.
    float v = static_cast<float>(comm.rank() + 1);
    comm.all_reduce(&v, &v, 1, f32, sum);
    EXPECT_EQ(v, 3.0f);
  });
}

TEST(CommBehaviour, SharedMemoryNamesAreGoneOnceConnected) {
  const std::string job = run_ranks(3, [](Communicator& comm) {
    // After construction every segment name is already unlinked (mappings stay valid).
    comm.barrier();
    const char* job = std::getenv("CHORUS_JOB_ID");
    ASSERT_NE(job, nullptr);
    EXPECT_TRUE(shm_entries_of(job).empty());
    std::vector<float> v(1 << 18, 1.0f);
    comm.all_reduce(v.data(), v.data(), v.size(), DataType::kF32, ReduceOp::kSum);
    EXPECT_EQ(v[1000], 3.0f);
  });
  EXPECT_TRUE(shm_entries_of(job).empty());
}

// The fixed size thresholds (CHORUS_TUNE=off; the tuner's own choices are tested in
// tuner_test.cc), the algorithm a Work reports, and forcing.
TEST(CommBehaviour, AlgorithmChoiceIsReportedAndForceable) {
  run_ranks(
      4,
      [](Communicator& comm) {
        EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 8), "direct");
        EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 64 << 20), "ring");
        float v[16] = {};
        Work w = comm.all_reduce_async(v, v, 16, DataType::kF32, ReduceOp::kSum);
        w.wait();
        EXPECT_EQ(w.algorithm(), "direct");
        comm.set_algorithm("tree");
        EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 64 << 20), "tree");
        // Collectives without a tree variant keep their default.
        EXPECT_EQ(comm.algorithm_for(Collective::kGather, 1024), "direct");
        comm.set_algorithm("auto");
        EXPECT_EQ(comm.algorithm_for(Collective::kAllGather, 1 << 20), "ring");
      },
      RunOptions{std::chrono::milliseconds(60000), {{"CHORUS_TUNE", "off"}}, ""});
  // Two ranks: the all-gather's ring and direct exchange are one step each, and the direct one
  // (which pushes from 128 KiB) is the default up to 32 MiB.
  run_ranks(
      2,
      [](Communicator& comm) {
        EXPECT_EQ(comm.algorithm_for(Collective::kAllGather, 256 << 10), "direct");
        EXPECT_EQ(comm.algorithm_for(Collective::kAllGather, 32 << 20), "direct");
        EXPECT_EQ(comm.algorithm_for(Collective::kAllGather, 64 << 20), "ring");
        EXPECT_EQ(comm.algorithm_for(Collective::kReduceScatter, 256 << 10), "ring");
      },
      RunOptions{std::chrono::milliseconds(60000), {{"CHORUS_TUNE", "off"}}, ""});
  run_ranks(
      2,
      [](Communicator& comm) { EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 8), "ring"); },
      RunOptions{std::chrono::milliseconds(60000), {{"CHORUS_ALGO", "ring"}}, ""});
}

TEST(CommBehaviour, EightRanksOnTwoCoresFinishPromptly) {
  // Oversubscribed: waits must back off, or this takes minutes instead of seconds.
  const auto start = std::chrono::steady_clock::now();
  run_ranks(
      8,
      [](Communicator& comm) {
        std::vector<float> v(1 << 16, 1.0f);
        for (int i = 0; i < 200; ++i)
          comm.all_reduce(v.data(), v.data(), v.size(), DataType::kF32, ReduceOp::kMax);
        EXPECT_EQ(v[0], 1.0f);
      },
      RunOptions{std::chrono::milliseconds(60000), {}, ""});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

}  // namespace
}  // namespace chorus::testing

namespace chorus::testing {
namespace {

// The harness itself: a failing assertion, an exception and a hang in one rank each fail the
// test and name that rank.
TEST(Harness, ReportsFailuresExceptionsAndHangsOfOneRank) {
  EXPECT_NONFATAL_FAILURE(run_processes(3, [](int rank) { EXPECT_NE(rank, 1); }),
                          "rank 1 failed (exit code 1)");
  EXPECT_NONFATAL_FAILURE(run_processes(2,
                                        [](int rank) {
                                          if (rank == 0) throw std::runtime_error("boom");
                                        }),
                          "rank 0 failed (exit code 2)");
  RunOptions quick;
  quick.deadline = std::chrono::milliseconds(500);
  EXPECT_NONFATAL_FAILURE(run_processes(
                              2,
                              [](int rank) {
                                if (rank == 1)
                                  std::this_thread::sleep_for(std::chrono::seconds(30));
                              },
                              quick),
                          "ranks 1 still running");
}

}  // namespace
}  // namespace chorus::testing
