// divide() on every instruction set: floats in their own precision (16-bit via f32, rounded once),
// integers truncating toward zero, including the min / -1 overflow and divisors wider than the
// element type.
#include "test_data.h"

namespace chorus::kernels::testing {
namespace {

constexpr int64_t kDivisors[] = {
    1, -1, 2, 3, -7, 8, 10, 1000, 65537, int64_t{1} << 40, INT64_MAX, INT64_MIN};

class Divide : public PerIsa {};

TEST_P(Divide, MatchesReference) {
  for (DataType dtype : kAllDataTypes) {
    const Buffer src = random_buffer(dtype, kMaxCount, 5 + static_cast<int>(dtype));
    const size_t size = dtype_size(dtype);
    for (int64_t divisor : kDivisors) {
      Buffer expected(dtype, kMaxCount);
      visit_type(dtype, [&]<class T>(TypeTag<T>) {
        for (size_t i = 0; i < kMaxCount; ++i)
          store(expected.at(0), i, ref_divide<T>(load<T>(src.at(1), i), divisor));
      });
      for (size_t count : kCounts) {
        if (count == kMaxCount && divisor != 3) continue;  // one large run per dtype suffices
        SCOPED_TRACE(::testing::Message()
                     << to_string(dtype) << " / " << divisor << " count " << count);
        Buffer dst(dtype, count);
        kernels().divide(dtype, dst.at(0), src.at(1), count, divisor);
        ASSERT_TRUE(same_elements(dtype, expected.at(0), dst.at(0), count)) << "out of place";
        std::memcpy(dst.at(1), src.at(1), count * size);
        kernels().divide(dtype, dst.at(1), dst.at(1), count, divisor);
        ASSERT_TRUE(same_elements(dtype, expected.at(0), dst.at(1), count)) << "in place";
      }
    }
  }
}

TEST_P(Divide, IntegersTruncateTowardZero) {
  const int32_t a[] = {7, -7, INT32_MIN, INT32_MAX};
  int32_t out[4];
  kernels().divide(DataType::kI32, out, a, 4, 2);
  EXPECT_EQ(out[0], 3);
  EXPECT_EQ(out[1], -3);
  EXPECT_EQ(out[2], INT32_MIN / 2);
  kernels().divide(DataType::kI32, out, a, 4, -1);
  EXPECT_EQ(out[2], INT32_MIN);  // -INT32_MIN wraps
  EXPECT_EQ(out[3], -INT32_MAX);
  const int64_t b[] = {INT64_MIN, -9};
  int64_t out64[2];
  kernels().divide(DataType::kI64, out64, b, 2, -1);
  EXPECT_EQ(out64[0], INT64_MIN);
  EXPECT_EQ(out64[1], 9);
}

CHORUS_INSTANTIATE_PER_ISA(Divide);

}  // namespace
}  // namespace chorus::kernels::testing
