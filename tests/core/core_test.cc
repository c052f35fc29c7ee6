#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/half.h"
#include "chorus/types.h"

namespace chorus {
namespace {

TEST(Half, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = half_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f)))) << b;
      continue;
    }
    EXPECT_EQ(float_to_half(f), b) << "half bits " << b;
  }
}

__attribute__((target("f16c"))) uint16_t hw_float_to_half(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, 0));
}

TEST(Half, MatchesF16CRoundingOnRandomFloats) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "CPU has no F16C";
  std::mt19937 rng(42);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = rng();
    float f = std::bit_cast<float>(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f), hw_float_to_half(f)) << "float bits " << bits;
  }
  // Every boundary region: floats near half subnormals, normals and overflow.
  for (uint32_t bits = 0x33000000u; bits < 0x47800000u; bits += 97) {
    float f = std::bit_cast<float>(bits);
    ASSERT_EQ(float_to_half(f), hw_float_to_half(f)) << "float bits " << bits;
    ASSERT_EQ(float_to_half(-f), hw_float_to_half(-f)) << "float bits -" << bits;
  }
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(float_to_bf16(1.00390625f), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1.0078125 (odd) and 1.015625: rounds up to even.
  EXPECT_EQ(float_to_bf16(1.01171875f), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bf16_to_float(static_cast<uint16_t>(b));
    if (!std::isnan(f)) EXPECT_EQ(float_to_bf16(f), b);
  }
}

TEST(Types, NamesRoundTrip) {
  for (DataType t : kAllDataTypes) EXPECT_EQ(parse_dtype(to_string(t)), t);
  for (ReduceOp op : kAllReduceOps) EXPECT_EQ(parse_reduce_op(to_string(op)), op);
  EXPECT_EQ(parse_dtype("bf16"), DataType::kBF16);
  EXPECT_FALSE(parse_dtype("float128").has_value());
  EXPECT_EQ(dtype_size(DataType::kI64), 8u);
  EXPECT_FALSE(is_valid(static_cast<DataType>(99)));
}

TEST(Config, ParseSize) {
  EXPECT_EQ(parse_size("0"), 0);
  EXPECT_EQ(parse_size("64K"), 65536);
  EXPECT_EQ(parse_size("2M"), 2 << 20);
  EXPECT_EQ(parse_size("1G"), int64_t{1} << 30);
  EXPECT_FALSE(parse_size("12Q").has_value());
  EXPECT_FALSE(parse_size("").has_value());
  EXPECT_FALSE(parse_size("-3").has_value());
}

TEST(Config, KnobReadsEnvAndRejectsGarbage) {
  static const IntKnob knob{"CHORUS_TEST_KNOB_X", 17, "test knob"};
  unsetenv("CHORUS_TEST_KNOB_X");
  EXPECT_EQ(knob.get(), 17);
  setenv("CHORUS_TEST_KNOB_X", "4K", 1);
  EXPECT_EQ(knob.get(), 4096);
  setenv("CHORUS_TEST_KNOB_X", "lots", 1);
  EXPECT_THROW(knob.get(), InvalidArgument);
  unsetenv("CHORUS_TEST_KNOB_X");
  bool listed = false;
  for (const auto& k : all_knobs()) listed |= k.name == "CHORUS_TEST_KNOB_X";
  EXPECT_TRUE(listed);
}

TEST(Error, MessageNamesRankOpAndSequence) {
  Timeout t("waited 5 s for ranks 2, 3", 1, "all_reduce", 42);
  EXPECT_EQ(t.kind(), ErrorKind::kTimeout);
  EXPECT_STREQ(t.what(), "chorus timeout [rank 1, all_reduce #42]: waited 5 s for ranks 2, 3");
  try {
    CHORUS_CHECK_EQ(1 + 1, 3, "arithmetic");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(2 vs 3)"), std::string::npos) << e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
  }
}

}  // namespace
}  // namespace chorus
