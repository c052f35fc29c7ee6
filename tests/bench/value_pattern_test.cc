#include "chorus_bench/value_pattern.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "chorus/error.h"

namespace chorus::bench {
namespace {

const int kWorldSizes[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 32, 63, 64, 100, 200};

// Index sets: the start (all prod/avg phases) and far out (high bits of the hash).
std::vector<size_t> test_indexes() {
  std::vector<size_t> v(300);
  std::iota(v.begin(), v.end(), size_t{0});
  for (size_t i = 0; i < 50; ++i) v.push_back((size_t{1} << 33) + 7919 * i);
  return v;
}

// True when `value` survives a trip through the element type unchanged.
bool representable(DataType dtype, int64_t value) {
  alignas(8) std::byte slot[8];
  store_value(dtype, slot, 0, value);
  return load_value(dtype, slot, 0) == static_cast<double>(value);
}

int64_t apply(ReduceOp op, int64_t a, int64_t b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return a + b;
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
    default:
      return 0;
  }
}

// Folds the inputs in `order`, checking that every partial result is exact in the element type
// (so a kernel that rounds to the type after each step gets the exact value), and returns the
// final result (divided by n for avg, checking the division is exact).
int64_t fold_exactly(const ValuePattern& p, size_t index, const std::vector<int>& order) {
  const DataType dtype = p.dtype();
  const ReduceOp op = *p.op();
  int64_t acc = p.input(order[0], index);
  for (size_t k = 1; k < order.size(); ++k) {
    acc = apply(op, acc, p.input(order[k], index));
    EXPECT_LE(std::abs(acc), p.bound());
    EXPECT_TRUE(representable(dtype, acc)) << to_string(dtype) << " " << to_string(op)
                                           << " n=" << p.world_size() << " partial " << acc;
  }
  if (op == ReduceOp::kAvg) {
    EXPECT_EQ(acc % p.world_size(), 0) << "avg sum not divisible by n";
    acc /= p.world_size();
  }
  return acc;
}

// Pairwise (tree) reduction of ranks [lo, hi).
int64_t fold_tree(const ValuePattern& p, size_t index, int lo, int hi) {
  if (hi - lo == 1) return p.input(lo, index);
  const int mid = lo + (hi - lo) / 2;
  const int64_t r = apply(*p.op(), fold_tree(p, index, lo, mid), fold_tree(p, index, mid, hi));
  EXPECT_LE(std::abs(r), p.bound());
  EXPECT_TRUE(representable(p.dtype(), r));
  return r;
}

TEST(ValuePattern, InputsAreExactAndNeverTheSentinel) {
  for (DataType dtype : kAllDataTypes) {
    alignas(8) std::byte sentinel[8];
    fill_sentinel(dtype, sentinel, 1);
    const double s = load_value(dtype, sentinel, 0);
    for (ReduceOp op : kAllReduceOps)
      for (int n : kWorldSizes) {
        const ValuePattern p(dtype, op, n);
        for (size_t i : test_indexes())
          for (int r = 0; r < n; ++r) {
            const int64_t v = p.input(r, i);
            ASSERT_LE(std::abs(v), p.bound());
            ASSERT_TRUE(representable(dtype, v)) << to_string(dtype) << " " << v;
            ASSERT_NE(static_cast<double>(v), s);
            if (dtype == DataType::kU8) {
              ASSERT_GE(v, 0);
            }
          }
      }
  }
}

TEST(ValuePattern, EveryReductionOrderIsExactForEveryTypeAndOp) {
  for (DataType dtype : kAllDataTypes)
    for (ReduceOp op : kAllReduceOps)
      for (int n : kWorldSizes) {
        SCOPED_TRACE(testing::Message() << to_string(dtype) << " " << to_string(op) << " n=" << n);
        const ValuePattern p(dtype, op, n);
        std::vector<int> order(n);
        for (size_t i : test_indexes()) {
          const int64_t want = p.reduced(i);
          ASSERT_TRUE(representable(dtype, want)) << want;
          // Ring orders (each rank first), the reverse order and a tree.
          for (int start = 0; start < std::min(n, 4); ++start) {
            for (int k = 0; k < n; ++k) order[k] = (start + k) % n;
            ASSERT_EQ(fold_exactly(p, i, order), want);
          }
          std::reverse(order.begin(), order.end());
          ASSERT_EQ(fold_exactly(p, i, order), want);
          int64_t tree = fold_tree(p, i, 0, n);
          if (op == ReduceOp::kAvg) tree /= n;
          ASSERT_EQ(tree, want);
        }
      }
}

TEST(ValuePattern, ValuesDependOnRankAndIndex) {
  for (DataType dtype : kAllDataTypes)
    for (std::optional<ReduceOp> op :
         {std::optional<ReduceOp>(), std::optional<ReduceOp>(ReduceOp::kSum),
          std::optional<ReduceOp>(ReduceOp::kMax)}) {
      const ValuePattern p(dtype, op, 4);
      int same_rank = 0;
      int same_index = 0;
      for (size_t i = 0; i < 1000; ++i) {
        same_rank += p.input(0, i) == p.input(1, i);
        same_index += p.input(0, i) == p.input(0, i + 1);
      }
      // Sums of bfloat16 and int8 over 4 ranks have only 32 or 64 values to pick from.
      EXPECT_LT(same_rank, 100) << to_string(dtype);
      EXPECT_LT(same_index, 100) << to_string(dtype);
    }
}

TEST(ValuePattern, ProductsAndAveragesAreNotTrivial) {
  const ValuePattern prod(DataType::kF32, ReduceOp::kProd, 4);
  const ValuePattern avg(DataType::kF32, ReduceOp::kAvg, 4);
  int negative = 0;
  int64_t largest = 0;
  int avg_not_input = 0;
  for (size_t i = 0; i < 100; ++i) {
    negative += prod.reduced(i) < 0;
    largest = std::max(largest, std::abs(prod.reduced(i)));
    avg_not_input += avg.reduced(i) != avg.input(0, i);
  }
  EXPECT_GT(negative, 0);
  EXPECT_EQ(largest, 16);  // all four ranks hold a two at some index
  EXPECT_GT(avg_not_input, 50);
}

TEST(ValuePattern, SentinelRoundTripsAsNonValue) {
  for (DataType dtype : kAllDataTypes) {
    std::vector<std::byte> buffer(4 * dtype_size(dtype));
    fill_sentinel(dtype, buffer.data(), 4);
    for (size_t i = 0; i < 4; ++i) {
      const double v = load_value(dtype, buffer.data(), i);
      if (is_floating(dtype))
        EXPECT_TRUE(std::isnan(v)) << to_string(dtype);
      else
        EXPECT_GT(std::abs(v), static_cast<double>(value_bound(dtype))) << to_string(dtype);
    }
  }
}

TEST(ValuePattern, ReducedNeedsAnOp) {
  const ValuePattern p(DataType::kF32, std::nullopt, 2);
  EXPECT_THROW(p.reduced(0), InvalidArgument);
  EXPECT_THROW(ValuePattern(DataType::kF32, ReduceOp::kSum, 0), InvalidArgument);
}

}  // namespace
}  // namespace chorus::bench
