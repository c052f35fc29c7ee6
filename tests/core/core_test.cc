#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/half.h"
#include "chorus/timeout.h"
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

// Timeouts from 1 ms to "never"; huge values saturate instead of wrapping into the past.
TEST(Timeout, ParsesSecondsAndNoDeadline) {
  std::string error;
  EXPECT_EQ(parse_timeout("10", &error), Millis(10000));
  EXPECT_EQ(parse_timeout("0.5", &error), Millis(500));
  EXPECT_EQ(parse_timeout("0.001", &error), Millis(1));
  EXPECT_EQ(parse_timeout("1e3", &error), Millis(1000000));
  for (const char* never :
       {"inf", "INF", "infinity", "never", "none", "0", "0.0", "1e10", "1e300", "1e400"})
    EXPECT_EQ(parse_timeout(never, &error), kNoDeadline) << never;
  for (const char* bad : {"", "abc", "10s", "-1", "-inf", "nan", "0.0004"}) {
    error.clear();
    EXPECT_FALSE(parse_timeout(bad, &error).has_value()) << bad;
    EXPECT_FALSE(error.empty()) << bad;
  }
}

TEST(Timeout, DeadlinesSaturate) {
  const auto now = std::chrono::steady_clock::now();
  for (Millis huge : {kNoDeadline, Millis::max(), Millis(INT64_MAX / 2)}) {
    const auto d = deadline_after(huge);
    EXPECT_GT(d, now + std::chrono::hours(24 * 365 * 49)) << huge.count();
    EXPECT_EQ(clamp_timeout(huge), kNoDeadline);
    // A deadline that far may still take the small additions waits make.
    EXPECT_GT(d + std::chrono::hours(24), d);
    EXPECT_GT(std::chrono::duration_cast<std::chrono::nanoseconds>(clamp_timeout(huge)).count(), 0)
        << "a clamped timeout fits in nanoseconds";
  }
  const auto negative = deadline_after(Millis(-5));  // a negative timeout is "now"
  EXPECT_LE(negative, std::chrono::steady_clock::now());
  EXPECT_EQ(describe_timeout(kNoDeadline), "no deadline");
  EXPECT_EQ(describe_timeout(Millis(300000)), "300 s");
  EXPECT_EQ(describe_timeout(Millis(250)), "0.25 s");
}

TEST(Timeout, ReadsChorusTimeoutAndNamesItWhenMalformed) {
  setenv("CHORUS_TIMEOUT", "2.5", 1);
  EXPECT_EQ(default_timeout(), Millis(2500));
  setenv("CHORUS_TIMEOUT", "inf", 1);
  EXPECT_EQ(default_timeout(), kNoDeadline);
  setenv("CHORUS_TIMEOUT", "-3", 1);
  try {
    default_timeout();
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("CHORUS_TIMEOUT='-3'"), std::string::npos) << e.what();
  }
  unsetenv("CHORUS_TIMEOUT");
  EXPECT_EQ(default_timeout(), Millis(300000));
}

TEST(Timeout, DeadlineScopesNestToTheEarliest) {
  using Clock = std::chrono::steady_clock;
  EXPECT_EQ(DeadlineScope::current(), Clock::time_point::max());
  const auto soon = Clock::now() + std::chrono::seconds(1);
  {
    DeadlineScope outer(soon);
    EXPECT_EQ(DeadlineScope::current(), soon);
    {
      DeadlineScope later(soon + std::chrono::seconds(5));
      EXPECT_EQ(DeadlineScope::current(), soon) << "an inner scope cannot extend the outer one";
      DeadlineScope earlier(soon - std::chrono::milliseconds(500));
      EXPECT_EQ(DeadlineScope::current(), soon - std::chrono::milliseconds(500));
    }
    EXPECT_EQ(DeadlineScope::current(), soon);
  }
  EXPECT_EQ(DeadlineScope::current(), Clock::time_point::max());
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
