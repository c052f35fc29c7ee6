// reduce() on every instruction set against the scalar reference: every DataType x ReduceOp, every
// count in kCounts, unaligned pointers and every aliasing shape the API allows.
#include <algorithm>
#include <map>
#include <vector>

#include "chorus/error.h"
#include "chorus/kernels/cpu.h"
#include "test_data.h"

namespace chorus::kernels::testing {
namespace {

// Inputs generated once per dtype and shared by every ISA's run.
const Buffer& input(DataType dtype, int which) {
  static std::map<std::pair<DataType, int>, Buffer> cache;
  auto it = cache.find({dtype, which});
  if (it == cache.end())
    it = cache
             .emplace(std::pair{dtype, which},
                      random_buffer(dtype, kMaxCount, 1000 * static_cast<int>(dtype) + which))
             .first;
  return it->second;
}

// out[i] = ref(a[i] op b[i]) for i in [0, count).
Buffer reference(DataType dtype, ReduceOp op, const void* a, const void* b, size_t count) {
  Buffer out(dtype, count);
  visit_type(dtype, [&]<class T>(TypeTag<T>) {
    for (size_t i = 0; i < count; ++i)
      store(out.at(0), i, ref_reduce<T>(op, load<T>(a, i), load<T>(b, i)));
  });
  return out;
}

class Reduce : public PerIsa {};

TEST_P(Reduce, MatchesReferenceInEveryShape) {
  for (DataType dtype : kAllDataTypes) {
    const Buffer& a = input(dtype, 0);
    const Buffer& b = input(dtype, 1);
    const size_t size = dtype_size(dtype);
    for (ReduceOp op : kAllReduceOps) {
      // Element-wise, so one reference per offset pair serves every count.
      const Buffer expected = reference(dtype, op, a.at(0), b.at(0), kMaxCount);
      const Buffer expected_shifted = reference(dtype, op, a.at(2), b.at(3), kMaxCount);
      const Buffer expected_square = reference(dtype, op, a.at(0), a.at(0), 4099);
      for (size_t count : kCounts) {
        SCOPED_TRACE(::testing::Message()
                     << to_string(dtype) << " " << to_string(op) << " count " << count);
        Buffer dst(dtype, count);
        // Separate buffers, aligned.
        kernels().reduce(dtype, op, dst.at(0), a.at(0), b.at(0), count);
        ASSERT_TRUE(same_elements(dtype, expected.at(0), dst.at(0), count)) << "out of place";
        // Separate buffers, each misaligned differently.
        kernels().reduce(dtype, op, dst.at(1), a.at(2), b.at(3), count);
        ASSERT_TRUE(same_elements(dtype, expected_shifted.at(0), dst.at(1), count)) << "unaligned";
        // The streaming variant (an unaligned head, whole 64-byte lines, then a tail), aligned
        // and not: the same bits.
        std::memset(dst.at(0), 0, count * size);
        kernels().reduce_stream(dtype, op, dst.at(0), a.at(0), b.at(0), count, nullptr);
        ASSERT_TRUE(same_elements(dtype, expected.at(0), dst.at(0), count)) << "streamed";
        // With a second, ordinary destination, misaligned against dst.
        Buffer also(dtype, count);
        std::memset(dst.at(1), 0, count * size);
        kernels().reduce_stream(dtype, op, dst.at(1), a.at(2), b.at(3), count, also.at(2));
        ASSERT_TRUE(same_elements(dtype, expected_shifted.at(0), dst.at(1), count))
            << "streamed, unaligned";
        ASSERT_TRUE(same_elements(dtype, expected_shifted.at(0), also.at(2), count))
            << "streamed, the second destination";
        // dst == a, at an odd element offset.
        std::memcpy(dst.at(1), a.at(0), count * size);
        kernels().reduce(dtype, op, dst.at(1), dst.at(1), b.at(0), count);
        ASSERT_TRUE(same_elements(dtype, expected.at(0), dst.at(1), count)) << "dst == a";
        // dst == b.
        std::memcpy(dst.at(0), b.at(0), count * size);
        kernels().reduce(dtype, op, dst.at(0), a.at(0), dst.at(0), count);
        ASSERT_TRUE(same_elements(dtype, expected.at(0), dst.at(0), count)) << "dst == b";
        if (count > 4099) continue;
        // a == b, out of place and fully in place.
        kernels().reduce(dtype, op, dst.at(0), a.at(0), a.at(0), count);
        ASSERT_TRUE(same_elements(dtype, expected_square.at(0), dst.at(0), count)) << "a == b";
        std::memcpy(dst.at(0), a.at(0), count * size);
        kernels().reduce(dtype, op, dst.at(0), dst.at(0), dst.at(0), count);
        ASSERT_TRUE(same_elements(dtype, expected_square.at(0), dst.at(0), count))
            << "dst == a == b";
      }
    }
  }
}

// The public entry point: the dispatcher's checks, then the kernel's bits.
TEST(ReduceStream, ChecksItsArgumentsAndMatchesReduce) {
  kernels::reduce_stream(DataType::kF32, ReduceOp::kSum, nullptr, nullptr, nullptr, 0);
  std::vector<float> a(3000), b(3000), want(3000), got(3000, -1.0f);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = 0.5f * static_cast<float>(i), b[i] = 1.0f - a[i] * a[i];
  kernels::reduce(DataType::kF32, ReduceOp::kMax, want.data(), a.data(), b.data(), a.size());
  kernels::reduce_stream(DataType::kF32, ReduceOp::kMax, got.data(), a.data(), b.data(), a.size());
  EXPECT_EQ(got, want);
  // In place, or dst overlapping an input anywhere, is refused before anything is written.
  EXPECT_THROW(
      kernels::reduce_stream(DataType::kF32, ReduceOp::kSum, a.data(), a.data(), b.data(), 10),
      InvalidArgument);
  EXPECT_THROW(
      kernels::reduce_stream(DataType::kF32, ReduceOp::kSum, b.data() + 5, a.data(), b.data(), 10),
      InvalidArgument);
  EXPECT_THROW(
      kernels::reduce_stream(DataType::kF32, ReduceOp::kSum, nullptr, a.data(), b.data(), 10),
      InvalidArgument);
  EXPECT_THROW(
      kernels::reduce_stream(DataType::kCount, ReduceOp::kSum, got.data(), a.data(), b.data(), 10),
      InvalidArgument);
  EXPECT_EQ(got, want);
  // The second destination: written with the same bits; refused where it overlaps anything.
  std::vector<float> also(3000, -1.0f);
  std::fill(got.begin(), got.end(), -1.0f);
  kernels::reduce_stream(DataType::kF32, ReduceOp::kMax, got.data(), a.data(), b.data(), a.size(),
                         also.data());
  EXPECT_EQ(got, want);
  EXPECT_EQ(also, want);
  for (void* bad : {static_cast<void*>(a.data() + 3), static_cast<void*>(b.data()),
                    static_cast<void*>(got.data() + 9)})
    EXPECT_THROW(kernels::reduce_stream(DataType::kF32, ReduceOp::kSum, got.data(), a.data(),
                                        b.data(), 10, bad),
                 InvalidArgument);
}

// Hand-picked cases the random inputs might miss.
TEST_P(Reduce, FloatMinMaxPropagateNaNAndKeepOperandOrderForZeros) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float a[] = {nan, 1.0f, nan, -0.0f, 0.0f, -1.0f};
  const float b[] = {1.0f, nan, nan, 0.0f, -0.0f, -1.0f};
  float out[6];
  kernels().reduce(DataType::kF32, ReduceOp::kMin, out, a, b, 6);
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]) && std::isnan(out[2]));
  EXPECT_EQ(std::bit_cast<uint32_t>(out[3]), std::bit_cast<uint32_t>(0.0f));  // b on a tie
  EXPECT_EQ(std::bit_cast<uint32_t>(out[4]), std::bit_cast<uint32_t>(-0.0f));
  EXPECT_EQ(out[5], -1.0f);
  kernels().reduce(DataType::kF32, ReduceOp::kMax, out, a, b, 6);
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]) && std::isnan(out[2]));
}

TEST_P(Reduce, IntegerSumAndProductWrap) {
  const int32_t a[] = {INT32_MAX, INT32_MIN, 65536, -1};
  const int32_t b[] = {1, -1, 65536, INT32_MIN};
  int32_t out[4];
  kernels().reduce(DataType::kI32, ReduceOp::kSum, out, a, b, 4);
  EXPECT_EQ(out[0], INT32_MIN);
  EXPECT_EQ(out[1], INT32_MAX);
  kernels().reduce(DataType::kI32, ReduceOp::kProd, out, a, b, 4);
  EXPECT_EQ(out[2], 0);          // 2^32 wraps to 0
  EXPECT_EQ(out[3], INT32_MIN);  // -1 * INT32_MIN wraps back to INT32_MIN
  const int8_t c[] = {127, -128};
  const int8_t d[] = {1, -1};
  int8_t out8[2];
  kernels().reduce(DataType::kI8, ReduceOp::kSum, out8, c, d, 2);
  EXPECT_EQ(out8[0], -128);
  EXPECT_EQ(out8[1], 127);
}

TEST_P(Reduce, HalfSumRoundsOnceToNearestEven) {
  // 2048 + 1 is a tie between 2048 and 2050 in f16: even wins. 2050 + 1 rounds up to 2052.
  const Half a[] = {Half::from_bits(float_to_half(2048.0f)),
                    Half::from_bits(float_to_half(2050.0f))};
  const Half b[] = {Half::from_bits(float_to_half(1.0f)), Half::from_bits(float_to_half(1.0f))};
  Half out[2];
  kernels().reduce(DataType::kF16, ReduceOp::kSum, out, a, b, 2);
  EXPECT_EQ(half_to_float(out[0].bits), 2048.0f);
  EXPECT_EQ(half_to_float(out[1].bits), 2052.0f);
}

CHORUS_INSTANTIATE_PER_ISA(Reduce);

}  // namespace
}  // namespace chorus::kernels::testing
