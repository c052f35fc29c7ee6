// plan_buckets: order, limits, dtypes, alignment and padding of the flat buckets.
#include <gtest/gtest.h>

#include "chorus/error.h"
#include "common/flat_layout.h"

namespace chorus::parallel {
namespace {

std::vector<size_t> reversed(size_t n) {
  std::vector<size_t> o;
  for (size_t i = n; i-- > 0;) o.push_back(i);
  return o;
}

TEST(FlatLayout, BucketsFollowTheOrderAndTheLimits) {
  // Five f32 parameters of 100 elements (400 bytes); the first bucket holds 512 bytes, the rest
  // 1024.
  const std::vector<ParamShape> p(5, {DataType::kF32, 100});
  const FlatLayout l = plan_buckets(p, reversed(5), 512, 1024, 1);
  ASSERT_EQ(l.buckets.size(), 3u);
  EXPECT_EQ(l.buckets[0].slots.size(), 1u);  // 400 + 448 would pass 512
  EXPECT_EQ(l.buckets[0].slots[0].param, 4u);
  EXPECT_EQ(l.buckets[1].slots.size(), 2u);  // 400, then 448 + 400 = 848 <= 1024
  EXPECT_EQ(l.buckets[1].slots[0].param, 3u);
  EXPECT_EQ(l.buckets[1].slots[1].param, 2u);
  EXPECT_EQ(l.buckets[1].slots[1].offset, 112);  // 100 rounded up to 16 f32 (64 bytes)
  EXPECT_EQ(l.where[0], (std::pair<size_t, size_t>{2, 1}));
  EXPECT_EQ(l.where[4], (std::pair<size_t, size_t>{0, 0}));
}

TEST(FlatLayout, DtypesNeverShareABucketAndLargeParametersStandAlone) {
  const std::vector<ParamShape> p = {
      {DataType::kF32, 10}, {DataType::kBF16, 10}, {DataType::kF32, 1000}, {DataType::kF32, 3}};
  const FlatLayout l = plan_buckets(p, {0, 1, 2, 3}, 64, 64, 1);
  ASSERT_EQ(l.buckets.size(), 4u);
  EXPECT_EQ(l.buckets[1].dtype, DataType::kBF16);
  EXPECT_EQ(l.buckets[2].numel, 1000);  // larger than the limit: a bucket of its own
  EXPECT_EQ(l.buckets[3].slots[0].param, 3u);
}

TEST(FlatLayout, BucketsArePaddedToShardEvenly) {
  const std::vector<ParamShape> p = {
      {DataType::kF32, 17}, {DataType::kF32, 1}, {DataType::kF32, 0}};
  for (int64_t n : {1, 2, 3, 7}) {
    const FlatLayout l = plan_buckets(p, {0, 1, 2}, 1 << 20, 1 << 20, n);
    ASSERT_EQ(l.buckets.size(), 1u);
    EXPECT_EQ(l.buckets[0].numel % n, 0) << n;
    EXPECT_GE(l.buckets[0].numel, 17 + 1);
    for (const FlatSlot& s : l.buckets[0].slots) {
      EXPECT_EQ(s.offset % 16, 0);
      EXPECT_LE(s.offset + s.numel, l.buckets[0].numel);
    }
    const auto [b0, e0] = shard_range(l.buckets[0].numel, static_cast<int>(n), 0);
    const auto [bl, el] =
        shard_range(l.buckets[0].numel, static_cast<int>(n), static_cast<int>(n - 1));
    EXPECT_EQ(b0, 0);
    EXPECT_EQ(el, l.buckets[0].numel);
    EXPECT_EQ(e0 - b0, el - bl);
  }
}

TEST(FlatLayout, RejectsBadInput) {
  const std::vector<ParamShape> p(2, {DataType::kF32, 4});
  EXPECT_THROW(plan_buckets(p, {0, 0}, 64, 64, 1), InvalidArgument);
  EXPECT_THROW(plan_buckets(p, {2}, 64, 64, 1), InvalidArgument);
  EXPECT_THROW(plan_buckets(p, {0, 1}, 64, 64, 0), InvalidArgument);
  EXPECT_THROW(plan_buckets(p, {0, 1}, 0, 64, 1), InvalidArgument);
}

}  // namespace
}  // namespace chorus::parallel
