#include "chorus_bench/collectives.h"

#include <gtest/gtest.h>

namespace chorus::bench {
namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

TEST(Collectives, NamesRoundTrip) {
  for (BenchCollective c : kAllBenchCollectives) EXPECT_EQ(parse_collective(to_string(c)), c);
  EXPECT_EQ(parse_collective("allreduce"), std::nullopt);
  EXPECT_EQ(parse_collective("all"), std::nullopt);  // handled by the option parser
}

TEST(Collectives, BusFactorsAreNcclTests) {
  for (int n : {1, 2, 3, 4, 8}) {
    const double ring = static_cast<double>(n - 1) / n;
    EXPECT_DOUBLE_EQ(bus_factor(BenchCollective::kAllReduce, n), 2 * ring) << n;
    for (BenchCollective c :
         {BenchCollective::kReduceScatter, BenchCollective::kAllGather, BenchCollective::kGather,
          BenchCollective::kScatter, BenchCollective::kAllToAll})
      EXPECT_DOUBLE_EQ(bus_factor(c, n), ring) << to_string(c) << " " << n;
    for (BenchCollective c :
         {BenchCollective::kBroadcast, BenchCollective::kReduce, BenchCollective::kSendRecv})
      EXPECT_DOUBLE_EQ(bus_factor(c, n), 1.0) << to_string(c) << " " << n;
  }
}

TEST(Collectives, CallCountIsPerRankBufferOrChunk) {
  EXPECT_EQ(call_count(BenchCollective::kAllReduce, 1 * kMiB, DataType::kF32, 4), 256 * kKiB);
  EXPECT_EQ(call_count(BenchCollective::kSendRecv, 64, DataType::kF64, 4), 8u);
  EXPECT_EQ(call_count(BenchCollective::kAllGather, 1 * kMiB, DataType::kF32, 4), 64 * kKiB);
  EXPECT_EQ(call_count(BenchCollective::kAllToAll, 96, DataType::kI8, 3), 32u);
  EXPECT_EQ(call_count(BenchCollective::kReduceScatter, 48, DataType::kF16, 3), 8u);
}

TEST(SizeList, GeometricPerRankBuffer) {
  const SizeRange range{8, 16 * kMiB, 4, 0};
  const std::vector<size_t> sizes =
      size_list(BenchCollective::kAllReduce, range, DataType::kF32, 4);
  const std::vector<size_t> want = {8,         32,         128,        512,      2 * kKiB, 8 * kKiB,
                                    32 * kKiB, 128 * kKiB, 512 * kKiB, 2 * kMiB, 8 * kMiB};
  EXPECT_EQ(sizes, want);
}

TEST(SizeList, TotalSizesStartAtTheSmallestValidSize) {
  // 4 ranks x 4-byte floats: 8 B would be 0 elements per rank, so the list starts at 16 B.
  const SizeRange range{8, 512, 4, 0};
  EXPECT_EQ(size_list(BenchCollective::kAllGather, range, DataType::kF32, 4),
            (std::vector<size_t>{16, 32, 128, 512}));
  // 3 ranks: multiples of 12 bytes.
  EXPECT_EQ(size_list(BenchCollective::kReduceScatter, range, DataType::kF32, 3),
            (std::vector<size_t>{12, 24, 120, 504}));
  // 8 doubles per total line with 8 ranks: 64 B is the smallest.
  EXPECT_EQ(size_list(BenchCollective::kAllToAll, range, DataType::kF64, 8),
            (std::vector<size_t>{64, 128, 512}));
}

TEST(SizeList, RoundingNeverDuplicatesOrEmitsZero) {
  for (BenchCollective c : kAllBenchCollectives)
    for (DataType dtype : kAllDataTypes)
      for (int n : {1, 2, 3, 4, 5, 7, 8, 16})
        for (uint64_t factor : {2, 3, 4}) {
          const SizeRange range{1, 1 * kMiB, factor, 0};
          const std::vector<size_t> sizes = size_list(c, range, dtype, n);
          const size_t unit = size_unit(c, dtype, n);
          ASSERT_FALSE(sizes.empty());
          EXPECT_EQ(sizes.front(), unit);
          for (size_t i = 0; i < sizes.size(); ++i) {
            EXPECT_GT(sizes[i], 0u);
            EXPECT_EQ(sizes[i] % unit, 0u) << sizes[i];
            EXPECT_LE(sizes[i], range.max_bytes);
            EXPECT_GE(call_count(c, sizes[i], dtype, n), 1u);
            if (i > 0) {
              EXPECT_LT(sizes[i - 1], sizes[i]);
            }
          }
        }
}

TEST(SizeList, UnitLargerThanMaxGivesNothing) {
  const SizeRange range{8, 8, 2, 0};
  EXPECT_TRUE(size_list(BenchCollective::kAllGather, range, DataType::kF64, 4).empty());
  EXPECT_EQ(size_list(BenchCollective::kAllReduce, range, DataType::kF64, 4),
            (std::vector<size_t>{8}));
}

TEST(SizeList, ArithmeticSteps) {
  const SizeRange range{1 * kKiB, 4 * kKiB, 2, 1 * kKiB};
  EXPECT_EQ(size_list(BenchCollective::kBroadcast, range, DataType::kF32, 4),
            (std::vector<size_t>{1 * kKiB, 2 * kKiB, 3 * kKiB, 4 * kKiB}));
  // 3 ranks x 4 bytes: each size rounds down to a multiple of 12.
  EXPECT_EQ(size_list(BenchCollective::kGather, range, DataType::kF32, 3),
            (std::vector<size_t>{1020, 2040, 3072, 4092}));
}

TEST(SizeList, HugeRangeDoesNotOverflow) {
  const SizeRange range{1, SIZE_MAX, 1024, 0};
  const std::vector<size_t> sizes = size_list(BenchCollective::kAllReduce, range, DataType::kU8, 1);
  ASSERT_EQ(sizes.size(), 7u);  // 1, 2^10, ..., 2^60
  EXPECT_EQ(sizes.back(), size_t{1} << 60);
}

}  // namespace
}  // namespace chorus::bench
