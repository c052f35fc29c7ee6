// Every collective x algorithm x dtype x op x count x placement x root, on world sizes
// {1, 2, 3, 4, 5, 8}, in real processes over the real bootstrap and shm transport, checked exactly
// against the reference (reference.h). The large count (2^20 + 3) runs every dtype with one op
// and every op with float, to keep the suite inside CI's budget; the small counts run the full
// product.
#include <gtest/gtest.h>

#include "collective_cases.h"
#include "multiproc.h"

namespace chorus::testing {
namespace {

constexpr size_t kSmallCounts[] = {0, 1, 7, 1000};
constexpr size_t kLargeCount = (size_t{1} << 20) + 3;

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
std::vector<Case> matrix(Collective coll, int n, Coverage coverage) {
  std::vector<Case> cases;
  const std::vector<ReduceOp> ops =
      reduces(coll) ? std::vector<ReduceOp>(std::begin(kAllReduceOps), std::end(kAllReduceOps))
                    : std::vector<ReduceOp>{ReduceOp::kSum};
  const std::vector<DataType> dtypes =
      coverage == Coverage::kFull
          ? std::vector<DataType>(std::begin(kAllDataTypes), std::end(kAllDataTypes))
          : std::vector<DataType>{DataType::kF32, DataType::kBF16, DataType::kU8};
  const std::vector<size_t> counts = coverage == Coverage::kFull
                                         ? std::vector<size_t>(std::begin(kSmallCounts), std::end(kSmallCounts))
                                         : std::vector<size_t>{1, 7, 1000, 20011};
  std::vector<int> roots{0};
  if (rooted(coll))
    for (int r = 1; r < n; ++r) roots.push_back(r);
  int salt = 0;
  for (const std::string& algo : algorithms_of(coll)) {
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
  if (coverage == Coverage::kFull) {
    // Large messages with the algorithm chosen for them: every dtype with the first op, every
    // op with float, roots 0 and n-1. (kTransport covers every algorithm's multi-chunk path.)
    for (int root : {0, n - 1}) {
      if (!rooted(coll) && root != 0) continue;
      for (bool in_place : {false, true}) {
        if (in_place && !has_in_place(coll)) continue;
        for (DataType dtype : kAllDataTypes)
          cases.push_back({coll, "auto", dtype, ops[0], kLargeCount, in_place, root, ++salt});
        for (size_t i = 1; i < ops.size(); ++i)
          cases.push_back({coll, "auto", DataType::kF32, ops[i], kLargeCount, in_place, root, ++salt});
      }
      if (n == 1) break;
    }
  }
  return cases;
}

class Collectives : public ::testing::TestWithParam<int> {
 protected:
  void run_matrix(Collective coll, Coverage coverage = Coverage::kFull,
                  const RunOptions& options = {}) {
    const int n = GetParam();
    const std::vector<Case> cases = matrix(coll, n, coverage);
    run_ranks(n, [&](Communicator& comm) {
      for (const Case& k : cases) {
        run_and_check(comm, k);
        if (::testing::Test::HasFailure()) return;  // one clear failure, not a cascade
      }
    }, options);
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

// The same matrices through the transport's other paths: tiny FIFO slots and pipelining chunks
// (many slots and chunks per message, single-copy from 4 KiB up), and single-copy disabled
// (every byte through the FIFO).
const RunOptions kSmallSlots{std::chrono::milliseconds(240000),
                             {{"CHORUS_SHM_SLOT_BYTES", "256"},
                              {"CHORUS_SHM_DEPTH", "3"},
                              {"CHORUS_CHUNK_BYTES", "1024"},
                              {"CHORUS_SHM_CMA_THRESHOLD", "4096"}},
                             ""};
const RunOptions kNoSingleCopy{std::chrono::milliseconds(240000), {{"CHORUS_SHM_CMA", "0"}}, ""};

TEST_P(Collectives, AllReduceSmallSlots) { run_matrix(Collective::kAllReduce, Coverage::kTransport, kSmallSlots); }
TEST_P(Collectives, ReduceScatterSmallSlots) { run_matrix(Collective::kReduceScatter, Coverage::kTransport, kSmallSlots); }
TEST_P(Collectives, AllGatherSmallSlots) { run_matrix(Collective::kAllGather, Coverage::kTransport, kSmallSlots); }
TEST_P(Collectives, BroadcastSmallSlots) { run_matrix(Collective::kBroadcast, Coverage::kTransport, kSmallSlots); }
TEST_P(Collectives, ReduceSmallSlots) { run_matrix(Collective::kReduce, Coverage::kTransport, kSmallSlots); }
TEST_P(Collectives, AllReduceNoSingleCopy) { run_matrix(Collective::kAllReduce, Coverage::kTransport, kNoSingleCopy); }
TEST_P(Collectives, AllGatherNoSingleCopy) { run_matrix(Collective::kAllGather, Coverage::kTransport, kNoSingleCopy); }

INSTANTIATE_TEST_SUITE_P(WorldSizes, Collectives, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

}  // namespace
}  // namespace chorus::testing
