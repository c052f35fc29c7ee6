// Deterministic mode (communicator.h, "Deterministic mode"): all_reduce, reduce_scatter and
// reduce equal the serial rank-order fold bit for bit (fold_cases.h), on world sizes 1-5, with
// every algorithm forced, in place and out of place, whatever the ring, chunk size or path; the
// same inputs without the mode show that the check can fail; the mode's plumbing (option, knob,
// split, agreement, what algorithm_for, explain and Work report).
#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "algo/algorithm.h"
#include "algo/registry.h"
#include "chorus/in_process_store.h"
#include "collective_cases.h"
#include "error_helpers.h"
#include "fold_cases.h"
#include "multiproc.h"

namespace chorus::testing {
namespace {

constexpr Collective kReductions[] = {Collective::kAllReduce, Collective::kReduceScatter,
                                      Collective::kReduce};
constexpr DataType kDtypes[] = {DataType::kF32, DataType::kF64, DataType::kF16, DataType::kBF16,
                                DataType::kI32};
constexpr size_t kLargeCount = (size_t{1} << 20) + 3;  // 4 MiB of f32

// "auto" and every algorithm registered for `coll` on one host, each with `suffix` ("/fifo").
std::vector<std::string> forced_algorithms(Collective coll, const std::string& suffix = "") {
  std::vector<std::string> names{"auto"};
  for (const std::string& a : algorithms_of(coll)) names.push_back(a + suffix);
  return names;
}

// kFull: every dtype x op at counts 0, 1, 7 and 10n + 1 (odd, not a multiple of n), f32 and bf16
// at 70001 (past every one-shot threshold), and 2^20 + 3 (reduce_scatter: per rank) for f32 sum
// and avg and bf16 sum. kVariant (the runs under other settings): fewer dtypes and ops.
enum class Scope { kFull, kVariant };

std::vector<FoldCase> fold_matrix(int n, Scope scope) {
  std::vector<FoldCase> cases;
  int salt = 0;
  const bool full = scope == Scope::kFull;
  const std::vector<DataType> dtypes =
      full ? std::vector<DataType>(std::begin(kDtypes), std::end(kDtypes))
           : std::vector<DataType>{DataType::kF32, DataType::kBF16, DataType::kI32};
  const std::vector<ReduceOp> ops =
      full ? std::vector<ReduceOp>(std::begin(kAllReduceOps), std::end(kAllReduceOps))
           : std::vector<ReduceOp>{ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin};
  const size_t odd = 10 * static_cast<size_t>(n) + 1;
  for (Collective coll : kReductions) {
    // Rooted: the root alternates between 0 and n-1 from case to case.
    auto add = [&](DataType dtype, ReduceOp op, size_t count, bool in_place) {
      const int root = coll == Collective::kReduce && salt % 2 == 1 ? n - 1 : 0;
      cases.push_back({coll, dtype, op, count, in_place, root, ++salt});
    };
    for (bool in_place : {false, true}) {
      for (DataType dtype : dtypes)
        for (ReduceOp op : ops)
          for (size_t count :
               full ? std::vector<size_t>{0, 1, 7, odd} : std::vector<size_t>{1, odd})
            add(dtype, op, count, in_place);
      for (DataType dtype : {DataType::kF32, DataType::kBF16})
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax})
          if (full || op == ReduceOp::kSum) add(dtype, op, 70001, in_place);
    }
    if (n == 1 && !full) continue;
    const size_t large = coll == Collective::kReduceScatter ? kLargeCount / n : kLargeCount;
    add(DataType::kF32, ReduceOp::kSum, large, false);
    add(DataType::kBF16, ReduceOp::kSum, large, true);
    if (full) add(DataType::kF32, ReduceOp::kAvg, large, true);
  }
  return cases;
}

// `first`: runs on every rank before the cases (checks of the set-up).
void run_fold_matrix(int n, Scope scope, RunOptions options, const std::string& suffix = "",
                     const std::function<void(Communicator&)>& first = {}) {
  options.env["CHORUS_DETERMINISTIC"] = "1";
  const std::vector<FoldCase> cases = fold_matrix(n, scope);
  run_ranks(
      n,
      [&](Communicator& comm) {
        ASSERT_TRUE(comm.deterministic());
        if (first) first(comm);
        for (const FoldCase& k : cases) {
          // The large cases with the selector's choice and the two rank-ordered algorithms only:
          // forced ring and tree run as the selector's choice anyway.
          std::vector<std::string> algos = forced_algorithms(k.coll, suffix);
          if (k.count > 100000)
            std::erase_if(algos, [](const std::string& a) {
              return a.starts_with("ring") || a.starts_with("tree");
            });
          check_against_fold(comm, k, algos);
          if (::testing::Test::HasFailure()) return;  // one clear failure, not a cascade
        }
      },
      options);
}

std::vector<int> usable_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof mask, &mask) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  return cpus;
}

class DeterministicReductions : public ::testing::TestWithParam<int> {};

TEST_P(DeterministicReductions, MatchTheRankOrderFold) {
  run_fold_matrix(GetParam(), Scope::kFull, {std::chrono::milliseconds(240000), {}, ""});
}

// The ring in rank order instead of by locality (the ring and tree algorithms would follow it).
TEST_P(DeterministicReductions, SameBitsWithTheRingInRankOrder) {
  run_fold_matrix(GetParam(), Scope::kVariant,
                  {std::chrono::milliseconds(240000), {{"CHORUS_RING", "rank"}}, ""});
}

// Ranks bound round-robin to the CPUs, so the locality ring groups them (0 2 1 3 on two CPUs).
TEST_P(DeterministicReductions, SameBitsWithRanksBoundAcrossCpus) {
  RunOptions o{std::chrono::milliseconds(240000), {{"CHORUS_RING", "locality"}}, ""};
  o.before_connect = [cpus = usable_cpus()](int rank) {
    if (cpus.empty()) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[static_cast<size_t>(rank) % cpus.size()], &one);
    ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  };
  // (Three ranks in a ring have the same neighbours in either order.)
  const bool permuted = GetParam() >= 4 && usable_cpus().size() >= 2;
  run_fold_matrix(GetParam(), Scope::kVariant, o, "", [&](Communicator& comm) {
    const std::vector<int> ring = comm.ring_order();
    if (permuted) EXPECT_FALSE(std::is_sorted(ring.begin(), ring.end()));
  });
}

// A small pipelining chunk, tiny FIFO slots, single copy from 4 KiB and streaming stores
// everywhere they may be used.
TEST_P(DeterministicReductions, SameBitsWithSmallChunksAndSlots) {
  run_fold_matrix(GetParam(), Scope::kVariant,
                  {std::chrono::milliseconds(240000),
                   {{"CHORUS_CHUNK_BYTES", "1024"},
                    {"CHORUS_SHM_SLOT_BYTES", "256"},
                    {"CHORUS_SHM_DEPTH", "3"},
                    {"CHORUS_SHM_CMA_THRESHOLD", "4096"},
                    {"CHORUS_STREAM_FROM", "1"}},
                   ""});
}

// Every algorithm on the FIFO path ("twoshot/fifo", ...), and with single copy disabled.
TEST_P(DeterministicReductions, SameBitsOnTheFifoPath) {
  run_fold_matrix(GetParam(), Scope::kVariant,
                  {std::chrono::milliseconds(240000),
                   {{"CHORUS_SHM_SLOT_BYTES", "4096"}, {"CHORUS_SHM_CMA_THRESHOLD", "4096"}},
                   ""},
                  "/fifo");
}
TEST_P(DeterministicReductions, SameBitsWithoutSingleCopy) {
  run_fold_matrix(GetParam(), Scope::kVariant,
                  {std::chrono::milliseconds(240000), {{"CHORUS_SHM_CMA", "0"}}, ""});
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, DeterministicReductions, ::testing::Values(1, 2, 3, 4, 5),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

// ---- the check has teeth -------------------------------------------------------------------

// Without the mode, the same inputs give other bits where the fold order differs: the ring's
// (each segment starts at another rank), the two-shot's own-first order, and the direct
// algorithm's single rounding of 16-bit sums. With it, the same calls give the fold.
TEST(DeterministicMode, OtherOrdersGiveOtherBits) {
  for (int n : {3, 4}) {
    for (bool deterministic : {false, true}) {
      RunOptions o{std::chrono::milliseconds(120000),
                   {{"CHORUS_DETERMINISTIC", deterministic ? "1" : "0"}},
                   ""};
      run_ranks(
          n,
          [&](Communicator& comm) {
            struct Probe {
              FoldCase k;
              std::string algo;
            };
            const Probe probes[] = {
                {{Collective::kAllReduce, DataType::kF32, ReduceOp::kSum, 4096, false, 0, 1},
                 "ring"},
                {{Collective::kAllReduce, DataType::kF32, ReduceOp::kSum, 4096, true, 0, 2},
                 "twoshot"},
                {{Collective::kAllReduce, DataType::kBF16, ReduceOp::kSum, 4096, false, 0, 3},
                 "direct"},
                {{Collective::kReduceScatter, DataType::kF32, ReduceOp::kSum, 4096, false, 0, 4},
                 "ring"},
                {{Collective::kReduce, DataType::kF64, ReduceOp::kSum, 4096, false, 0, 5}, "ring"},
                {{Collective::kAllReduce, DataType::kF32, ReduceOp::kMin, 4096, false, 0, 6},
                 "ring"},
            };
            for (const Probe& p : probes) {
              FoldCheck check(p.k, comm.rank(), n);
              std::string why;
              const size_t differ = check.differing(comm, p.algo, &why);
              // Summed over the ranks: a reduce-scatter rank whose block happens to be folded in
              // rank order sees no difference.
              int64_t anywhere = static_cast<int64_t>(differ);
              comm.all_reduce(&anywhere, &anywhere, 1, DataType::kI64, ReduceOp::kSum);
              if (deterministic)
                EXPECT_EQ(differ, 0u)
                    << p.k.describe() << " " << p.algo << " n=" << n << ": " << why;
              else
                EXPECT_GT(anywhere, 0) << p.k.describe() << " " << p.algo << " n=" << n
                                       << " gave the rank-order fold without deterministic mode";
            }
          },
          o);
    }
  }
}

// ---- the mode's plumbing --------------------------------------------------------------------

TEST(DeterministicMode, OptionKnobAndSplit) {
  run_ranks(3, [](Communicator& comm) {
    EXPECT_FALSE(comm.deterministic());
    std::optional<Communicator> child = comm.split(0, comm.rank());
    ASSERT_TRUE(child);
    EXPECT_FALSE(child->deterministic());
  });
  run_ranks(3,
            [](Communicator& comm) {
              EXPECT_TRUE(comm.deterministic());
              // Children inherit the mode (also a child of one rank, which makes no store round).
              for (int color : {0, comm.rank()}) {
                std::optional<Communicator> child = comm.split(color, -comm.rank());
                ASSERT_TRUE(child);
                EXPECT_TRUE(child->deterministic());
                check_against_fold(
                    *child,
                    {Collective::kAllReduce, DataType::kF32, ReduceOp::kSum, 70001, false, 0, 7},
                    {"auto", "ring"});
              }
            },
            {std::chrono::milliseconds(60000), {{"CHORUS_DETERMINISTIC", "1"}}, ""});
  // CommOptions::deterministic, with the knob unset, on explicit communicators too.
  run_processes(2, [](int rank) {
    unsetenv("CHORUS_DETERMINISTIC");
    CommOptions o;
    o.deterministic = true;
    Communicator comm = Communicator::from_env(o);
    EXPECT_TRUE(comm.deterministic());
    check_against_fold(comm,
                       {Collective::kReduce, DataType::kBF16, ReduceOp::kSum, 1001, true, 1, 8},
                       {"auto", "tree"});
    (void)rank;
  });
  // A malformed knob is refused before anything connects.
  setenv("CHORUS_DETERMINISTIC", "2", 1);
  auto e = error_of([] { Communicator c(0, 1, std::make_shared<InProcessStore>()); });
  unsetenv("CHORUS_DETERMINISTIC");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind(), ErrorKind::kInvalidArgument) << e->what();
  EXPECT_TRUE(contains(e->what(), "CHORUS_DETERMINISTIC=2")) << e->what();
}

// Every rank must run in the same mode: a rank that differs from rank 0 refuses at set-up.
TEST(DeterministicMode, RanksThatDisagreeAreRefused) {
  RunOptions options;
  options.env["CHORUS_TIMEOUT"] = "2";
  run_processes(
      2,
      [&](int rank) {
        if (rank == 1) setenv("CHORUS_DETERMINISTIC", "1", 1);
        auto e = error_of([] { Communicator::from_env().barrier(); });
        ASSERT_TRUE(e);
        if (rank == 1)
          EXPECT_TRUE(contains(e->what(),
                               "rank 0 runs with deterministic reductions off but this "
                               "rank with them on"))
              << e->what();
      },
      options);
}

// The selector chooses rank-ordered algorithms; a forced one that is not is replaced for the
// reductions only, and algorithm_for, explain and Work::algorithm say what runs.
TEST(DeterministicMode, ReportsTheAlgorithmThatRuns) {
  for (const char* tune : {"on", "off"})
    run_ranks(
        4,
        [](Communicator& comm) {
          for (Collective coll : kReductions)
            for (size_t bytes : {size_t{8}, size_t{64} << 10, size_t{1} << 20, size_t{256} << 20}) {
              const auto v = algo::parse_variant(comm.algorithm_for(coll, bytes));
              ASSERT_TRUE(v);
              EXPECT_TRUE(algo::folds_in_rank_order(coll, v->algo))
                  << to_string(coll) << " " << bytes << ": " << comm.algorithm_for(coll, bytes);
              if (bytes >= (size_t{256} << 20)) EXPECT_EQ(v->algo, algo::Algorithm::kTwoShot);
              int chosen = 0;
              for (const AlgorithmEstimate& e : comm.explain(coll, bytes)) {
                const auto ev = algo::parse_variant(e.algorithm);
                ASSERT_TRUE(ev);
                EXPECT_TRUE(algo::folds_in_rank_order(coll, ev->algo)) << e.algorithm;
                if (e.chosen) {
                  ++chosen;
                  EXPECT_EQ(e.algorithm, comm.algorithm_for(coll, bytes));
                }
              }
              EXPECT_EQ(chosen, 1);
            }
          auto algo_for = [&](Collective coll, size_t bytes) {
            return algo::parse_variant(comm.algorithm_for(coll, bytes))->algo;
          };
          comm.set_algorithm("ring");
          EXPECT_EQ(algo_for(Collective::kAllReduce, 256 << 20), algo::Algorithm::kTwoShot);
          EXPECT_EQ(algo_for(Collective::kReduceScatter, 256 << 20), algo::Algorithm::kTwoShot);
          EXPECT_EQ(algo_for(Collective::kReduce, 256 << 20), algo::Algorithm::kTwoShot);
          EXPECT_EQ(algo_for(Collective::kAllReduce, 8), algo::Algorithm::kDirect);
          EXPECT_EQ(comm.algorithm_for(Collective::kAllGather, 64 << 20),
                    "ring");  // not a reduction
          std::vector<float> v(70001, 1.0f);
          Work w =
              comm.all_reduce_async(v.data(), v.data(), v.size(), DataType::kF32, ReduceOp::kSum);
          w.wait();
          EXPECT_EQ(w.algorithm(), comm.algorithm_for(Collective::kAllReduce, v.size() * 4));
          EXPECT_EQ(v[0], 4.0f);
          comm.set_algorithm("direct/fifo");  // rank-ordered: runs as forced
          EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 64 << 20), "direct/fifo");
          comm.set_algorithm("twoshot");
          EXPECT_EQ(comm.algorithm_for(Collective::kReduce, 8), "twoshot");
        },
        {std::chrono::milliseconds(60000),
         {{"CHORUS_DETERMINISTIC", "1"}, {"CHORUS_TUNE", tune}},
         ""});
}

TEST(DeterministicMode, RankOrderedSelection) {
  using algo::Algorithm;
  for (Collective coll : kReductions) {
    EXPECT_TRUE(algo::folds_in_rank_order(coll, Algorithm::kDirect));
    EXPECT_TRUE(algo::folds_in_rank_order(coll, Algorithm::kTwoShot));
    EXPECT_FALSE(algo::folds_in_rank_order(coll, Algorithm::kRing));
    EXPECT_FALSE(algo::folds_in_rank_order(coll, Algorithm::kTree));
    EXPECT_FALSE(algo::folds_in_rank_order(coll, Algorithm::kHier));
    for (int n : {2, 3, 8})
      for (size_t bytes = 8; bytes <= (size_t{1} << 30); bytes *= 4) {
        const Algorithm a = algo::select_rank_ordered(coll, bytes, n);
        EXPECT_TRUE(algo::folds_in_rank_order(coll, a));
        EXPECT_NE(algo::find_algorithm(coll, a), nullptr);
      }
  }
  // Collectives that do not reduce keep every algorithm and the default choice.
  EXPECT_TRUE(algo::folds_in_rank_order(Collective::kAllGather, Algorithm::kRing));
  EXPECT_TRUE(algo::folds_in_rank_order(Collective::kBroadcast, Algorithm::kTree));
  EXPECT_EQ(algo::select_rank_ordered(Collective::kBroadcast, 64 << 20, 4),
            algo::select_default(Collective::kBroadcast, 64 << 20, 4));
}

}  // namespace
}  // namespace chorus::testing
