// Every collective x algorithm x dtype x op x count x placement x root, on world sizes
// {1, 2, 3, 4, 5, 8} (the transport's other paths on {1, ..., 4}), in real processes over the real
// bootstrap and shm transport, checked exactly against the reference (reference.h). The large count
// (2^20 + 3) runs every dtype with one op and every op with float (at 8 ranks, where it costs the
// most, one dtype of each width with one op, and float with avg), to keep the suite inside CI's
// budget; the small counts run the full product.
#include <gtest/gtest.h>
#include <sched.h>

#include <span>

#include "algo/patterns.h"
#include "collective_cases.h"
#include "multiproc.h"
#include "transport/factory.h"

namespace chorus::testing {
namespace {

constexpr size_t kSmallCounts[] = {0, 1, 7, 1000};
constexpr size_t kLargeCount = (size_t{1} << 20) + 3;
// World sizes from which the large count runs a sample: the large paths (chunking, single copy,
// streaming stores) depend on the element's width, not its type, and the ops' large paths are
// covered at the smaller world sizes.
constexpr int kSampledLargeFrom = 8;
constexpr DataType kLargeSample[] = {DataType::kU8, DataType::kBF16, DataType::kF32,
                                     DataType::kF64};

bool reduces(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}
bool rooted(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather ||
         c == Collective::kScatter;
}
bool has_in_place(Collective c) { return c != Collective::kAllToAll; }

// How much of the product a run covers.
enum class Coverage {
  kFull,       // every dtype x op x small count, plus the large count with the default algorithm
  kTransport,  // the transport's other paths: fewer dtypes, mid-size counts, every algorithm
};

// All cases for one collective on an n-rank communicator.
// `suffix` is appended to every algorithm name ("/fifo": the FIFO path of each).
std::vector<Case> matrix(Collective coll, int n, Coverage coverage,
                         const std::string& suffix = "") {
  std::vector<Case> cases;
  const std::vector<ReduceOp> ops =
      reduces(coll) ? std::vector<ReduceOp>(std::begin(kAllReduceOps), std::end(kAllReduceOps))
                    : std::vector<ReduceOp>{ReduceOp::kSum};
  const std::vector<DataType> dtypes =
      coverage == Coverage::kFull
          ? std::vector<DataType>(std::begin(kAllDataTypes), std::end(kAllDataTypes))
          : std::vector<DataType>{DataType::kF32, DataType::kBF16, DataType::kU8};
  const std::vector<size_t> counts =
      coverage == Coverage::kFull
          ? std::vector<size_t>(std::begin(kSmallCounts), std::end(kSmallCounts))
          : std::vector<size_t>{1, 7, 1000, 20011};
  std::vector<int> roots{0};
  if (rooted(coll))
    for (int r = 1; r < n; ++r) roots.push_back(r);
  int salt = 0;
  for (const std::string& name : algorithms_of(coll)) {
    const std::string algo = name + suffix;
    for (int root : roots) {
      for (bool in_place : {false, true}) {
        if (in_place && !has_in_place(coll)) continue;
        for (DataType dtype : dtypes)
          for (ReduceOp op : ops)
            for (size_t count : counts) {
              // Rooted collectives: every root with one mid count, the rest with roots 0 and n-1.
              if (root != 0 && root != n - 1 && count != 1000) continue;
              cases.push_back({coll, algo, dtype, op, count, in_place, root, ++salt});
            }
        // Messages that wrap the FIFO several times (and cross the single-copy threshold).
        if (coverage == Coverage::kTransport && (root == 0 || root == n - 1))
          for (ReduceOp op : ops)
            cases.push_back({coll, algo, DataType::kF32, op, 300007, in_place, root, ++salt});
      }
    }
  }
  if (coverage == Coverage::kFull && suffix.empty()) {
    // Large messages with the algorithm chosen for them: every dtype with the first op, every
    // op with float, roots 0 and n-1. (kTransport covers every algorithm's multi-chunk path.)
    const bool sampled = n >= kSampledLargeFrom;
    const std::span<const DataType> large_dtypes = sampled
                                                       ? std::span<const DataType>(kLargeSample)
                                                       : std::span<const DataType>(kAllDataTypes);
    for (int root : {0, n - 1}) {
      if (!rooted(coll) && root != 0) continue;
      for (bool in_place : {false, true}) {
        if (in_place && !has_in_place(coll)) continue;
        for (DataType dtype : large_dtypes)
          cases.push_back({coll, "auto", dtype, ops[0], kLargeCount, in_place, root, ++salt});
        for (size_t i = 1; i < ops.size(); ++i)
          if (!sampled || ops[i] == ReduceOp::kAvg)
            cases.push_back(
                {coll, "auto", DataType::kF32, ops[i], kLargeCount, in_place, root, ++salt});
      }
      if (n == 1) break;
    }
  }
  return cases;
}

class Collectives : public ::testing::TestWithParam<int> {
 protected:
  void run_matrix(Collective coll, Coverage coverage = Coverage::kFull,
                  const RunOptions& options = {}, const std::string& suffix = "") {
    const int n = GetParam();
    const std::vector<Case> cases = matrix(coll, n, coverage, suffix);
    run_ranks(
        n,
        [&](Communicator& comm) {
          for (const Case& k : cases) {
            run_and_check(comm, k);
            if (::testing::Test::HasFailure()) return;  // one clear failure, not a cascade
          }
        },
        options);
  }
};

TEST_P(Collectives, AllReduce) { run_matrix(Collective::kAllReduce); }
TEST_P(Collectives, ReduceScatter) { run_matrix(Collective::kReduceScatter); }
TEST_P(Collectives, AllGather) { run_matrix(Collective::kAllGather); }
TEST_P(Collectives, Broadcast) { run_matrix(Collective::kBroadcast); }
TEST_P(Collectives, Reduce) { run_matrix(Collective::kReduce); }
TEST_P(Collectives, Gather) { run_matrix(Collective::kGather); }
TEST_P(Collectives, Scatter) { run_matrix(Collective::kScatter); }
TEST_P(Collectives, AllToAll) { run_matrix(Collective::kAllToAll); }

class CollectivePaths : public Collectives {};

// The same matrices through the transport's other paths, on world sizes 1-4 (a path's chunking
// and slots do not change with more ranks; five and eight oversubscribed would double the time):
// tiny FIFO slots and pipelining chunks (many slots and chunks per message, single-copy from 4 KiB
// up; forwards find the next FIFO full and catch up from the result; results written with streaming
// stores at every size where stream_results() allows them), and single-copy disabled (every byte
// through the FIFO).
const RunOptions kSmallSlots{std::chrono::milliseconds(240000),
                             {{"CHORUS_SHM_SLOT_BYTES", "256"},
                              {"CHORUS_SHM_DEPTH", "3"},
                              {"CHORUS_SHM_FAN_SLOT_BYTES", "256"},
                              {"CHORUS_SHM_FAN_DEPTH", "2"},
                              {"CHORUS_CHUNK_BYTES", "1024"},
                              {"CHORUS_SHM_CMA_THRESHOLD", "4096"},
                              {"CHORUS_STREAM_FROM", "1"}},
                             ""};
const RunOptions kNoSingleCopy{std::chrono::milliseconds(240000), {{"CHORUS_SHM_CMA", "0"}}, ""};

TEST_P(CollectivePaths, AllReduceSmallSlots) {
  run_matrix(Collective::kAllReduce, Coverage::kTransport, kSmallSlots);
}
TEST_P(CollectivePaths, ReduceScatterSmallSlots) {
  run_matrix(Collective::kReduceScatter, Coverage::kTransport, kSmallSlots);
}
TEST_P(CollectivePaths, AllGatherSmallSlots) {
  run_matrix(Collective::kAllGather, Coverage::kTransport, kSmallSlots);
}
TEST_P(CollectivePaths, BroadcastSmallSlots) {
  run_matrix(Collective::kBroadcast, Coverage::kTransport, kSmallSlots);
}
TEST_P(CollectivePaths, ReduceSmallSlots) {
  run_matrix(Collective::kReduce, Coverage::kTransport, kSmallSlots);
}
TEST_P(CollectivePaths, AllReduceNoSingleCopy) {
  run_matrix(Collective::kAllReduce, Coverage::kTransport, kNoSingleCopy);
}
TEST_P(CollectivePaths, AllGatherNoSingleCopy) {
  run_matrix(Collective::kAllGather, Coverage::kTransport, kNoSingleCopy);
}

// Every algorithm on the FIFO path ("ring/fifo", ...) where single copy would otherwise start at
// 4 KiB and messages span several slots: the sends copy through the FIFO whatever their size, and
// the ring and chain algorithms forward in the pass that receives. Results are written with
// streaming stores at every size where stream_results() allows them (broadcast and all-gather in
// place too).
const RunOptions kFifoPath{std::chrono::milliseconds(240000),
                           {{"CHORUS_SHM_SLOT_BYTES", "4096"},
                            {"CHORUS_SHM_CMA_THRESHOLD", "4096"},
                            {"CHORUS_STREAM_FROM", "1"}},
                           ""};
TEST_P(CollectivePaths, AllReduceFifoPath) {
  run_matrix(Collective::kAllReduce, Coverage::kTransport, kFifoPath, "/fifo");
}
TEST_P(CollectivePaths, ReduceScatterFifoPath) {
  run_matrix(Collective::kReduceScatter, Coverage::kTransport, kFifoPath, "/fifo");
}
TEST_P(CollectivePaths, AllGatherFifoPath) {
  run_matrix(Collective::kAllGather, Coverage::kTransport, kFifoPath, "/fifo");
}
TEST_P(CollectivePaths, BroadcastFifoPath) {
  run_matrix(Collective::kBroadcast, Coverage::kTransport, kFifoPath, "/fifo");
}
TEST_P(CollectivePaths, ReduceFifoPath) {
  run_matrix(Collective::kReduce, Coverage::kTransport, kFifoPath, "/fifo");
}
TEST_P(CollectivePaths, GatherFifoPath) {
  run_matrix(Collective::kGather, Coverage::kTransport, kFifoPath, "/fifo");
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Collectives, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const auto& info) { return "np" + std::to_string(info.param); });
INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivePaths, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

// ---- ranks bound to CPUs: the ring follows the machine
// --------------------------------------------
//
// Each rank is bound to one CPU, round-robin over the CPUs this test may use (as chorus-run --bind
// does with more ranks than cores), so ranks sharing a CPU are grouped and the ring is not rank
// order (on 2 CPUs with 4 ranks: 0 2 1 3). Every ring, chain and tree algorithm then runs over that
// permuted ring and is checked exactly.

std::vector<int> usable_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof mask, &mask) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  return cpus;
}

RunOptions bound_ranks() {
  RunOptions o;
  o.deadline = std::chrono::milliseconds(240000);
  o.before_connect = [cpus = usable_cpus()](int rank) {
    if (cpus.empty()) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[static_cast<size_t>(rank) % cpus.size()], &one);
    ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  };
  return o;
}

class BoundCollectives : public Collectives {};

TEST_P(BoundCollectives, RingGroupsRanksByCpu) {
  const int n = GetParam();
  const bool several_cpus = usable_cpus().size() >= 2;
  run_ranks(
      n,
      [&](Communicator& comm) {
        // Every rank's own view of where it is bound, gathered, gives the ring all must agree on.
        const algo::RankPlace mine = transport::local_place();
        int32_t here[3] = {mine.package, mine.numa, mine.cpu};
        std::vector<int32_t> all(3 * static_cast<size_t>(n));
        comm.all_gather(here, all.data(), 3, DataType::kI32);
        std::vector<algo::RankPlace> places(n);
        for (int r = 0; r < n; ++r) places[r] = {0, all[3 * r], all[3 * r + 1], all[3 * r + 2]};
        const std::vector<int> ring = comm.ring_order();
        EXPECT_EQ(ring, algo::ring_by_locality(places));
        if (several_cpus) {
          EXPECT_GE(mine.cpu, 0) << "a bound rank knows its CPU";
          EXPECT_NE(ring[1], 1) << "ranks 0 and 1 are on different CPUs, so not ring neighbours";
        }
      },
      bound_ranks());
}

TEST_P(BoundCollectives, RankOrderWhenAsked) {
  RunOptions o = bound_ranks();
  o.env["CHORUS_RING"] = "rank";
  run_ranks(
      GetParam(),
      [&](Communicator& comm) {
        const std::vector<int> ring = comm.ring_order();
        for (int p = 0; p < comm.size(); ++p) EXPECT_EQ(ring[p], p);
      },
      o);
}

TEST_P(BoundCollectives, AllReduce) {
  run_matrix(Collective::kAllReduce, Coverage::kTransport, bound_ranks());
}
TEST_P(BoundCollectives, ReduceScatter) {
  run_matrix(Collective::kReduceScatter, Coverage::kTransport, bound_ranks());
}
TEST_P(BoundCollectives, AllGather) {
  run_matrix(Collective::kAllGather, Coverage::kTransport, bound_ranks());
}
TEST_P(BoundCollectives, Broadcast) {
  run_matrix(Collective::kBroadcast, Coverage::kTransport, bound_ranks());
}
TEST_P(BoundCollectives, Reduce) {
  run_matrix(Collective::kReduce, Coverage::kTransport, bound_ranks());
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, BoundCollectives, ::testing::Values(4, 5, 8),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

}  // namespace
}  // namespace chorus::testing
