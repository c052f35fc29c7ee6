// DistributedSampler: equal shares, padding or dropping, epochs, and the global-batch property.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "chorus/parallel/sampler.h"

namespace chorus::parallel {
namespace {

std::vector<std::vector<int64_t>> shares(int64_t n, int ranks, SamplerOptions o, int64_t epoch) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < ranks; ++r) {
    DistributedSampler s(n, ranks, r, o);
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

TEST(Sampler, SharesAreEqualAndCoverTheDatasetOnce) {
  for (int64_t n : {0, 1, 7, 12, 13, 100}) {
    for (int ranks : {1, 2, 3, 4}) {
      const auto s = shares(n, ranks, {.shuffle = true, .seed = 3}, 0);
      std::multiset<int64_t> seen;
      for (const auto& mine : s) {
        EXPECT_EQ(static_cast<int64_t>(mine.size()), (n + ranks - 1) / ranks) << n << " " << ranks;
        seen.insert(mine.begin(), mine.end());
      }
      for (int64_t i = 0; i < n; ++i)
        EXPECT_GE(seen.count(i), 1u) << "index " << i << " never seen";
      // Padding repeats at most ranks - 1 samples.
      EXPECT_EQ(static_cast<int64_t>(seen.size()), (n + ranks - 1) / ranks * ranks);
    }
  }
}

TEST(Sampler, DropLastTrimsTheTail) {
  const auto s = shares(13, 4, {.shuffle = false, .drop_last = true}, 0);
  for (const auto& mine : s) EXPECT_EQ(mine.size(), 3u);
  EXPECT_EQ(s[1], (std::vector<int64_t>{1, 5, 9}));  // without shuffling: positions r, r+4, ...
  DistributedSampler t(13, 4, 0, {.drop_last = true});
  EXPECT_EQ(t.size(), 3);
  EXPECT_EQ(t.total_size(), 12);
}

TEST(Sampler, EpochsReshuffleTheSameWayOnEveryRank) {
  const auto e0 = shares(50, 2, {.seed = 9}, 0), e0_again = shares(50, 2, {.seed = 9}, 0);
  const auto e1 = shares(50, 2, {.seed = 9}, 1), other_seed = shares(50, 2, {.seed = 10}, 0);
  EXPECT_EQ(e0, e0_again);
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, other_seed);
}

TEST(Sampler, StepsOfAllRanksCoverTheSingleProcessBatch) {
  // b samples per rank per step on R ranks == batch b*R on one rank: the same set each step.
  const int64_t n = 96, b = 4;
  const SamplerOptions o{.seed = 5};
  DistributedSampler one(n, 1, 0, o);
  one.set_epoch(2);
  const std::vector<int64_t> all = one.indices();
  for (int ranks : {2, 3, 4}) {
    const auto s = shares(n, ranks, o, 2);
    for (int64_t step = 0; step * b < static_cast<int64_t>(s[0].size()); ++step) {
      std::multiset<int64_t> parallel, single;
      for (const auto& mine : s)
        for (int64_t j = step * b; j < std::min<int64_t>((step + 1) * b, mine.size()); ++j)
          parallel.insert(mine[static_cast<size_t>(j)]);
      for (int64_t j = step * b * ranks; j < (step + 1) * b * ranks && j < n; ++j)
        single.insert(all[static_cast<size_t>(j)]);
      EXPECT_EQ(parallel, single) << ranks << " ranks, step " << step;
    }
  }
}

TEST(Sampler, RejectsBadArguments) {
  EXPECT_THROW(DistributedSampler(-1, 2, 0), InvalidArgument);
  EXPECT_THROW(DistributedSampler(10, 0, 0), InvalidArgument);
  EXPECT_THROW(DistributedSampler(10, 2, 2), InvalidArgument);
  EXPECT_THROW(DistributedSampler(10, 2, -1), InvalidArgument);
}

}  // namespace
}  // namespace chorus::parallel
