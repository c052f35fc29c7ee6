// cast() on every instruction set: all 8 x 8 type pairs against the exact (long double)
// reference, values at every rounding and saturation boundary, in-place same-size casts, and
// lossless round trips.
#include "test_data.h"

namespace chorus::kernels::testing {
namespace {

constexpr size_t kCastCounts[] = {0, 1, 7, 17, 1000, 4099};

// Random values plus the boundaries where conversions go wrong: integer limits in every float
// type, ties at every target precision, values just past the 16-bit ranges.
template <class T>
std::vector<T> interesting_values() {
  std::vector<T> v;
  auto add = [&](long double x) {
    if constexpr (std::is_integral_v<T>) {
      if (x >= std::numeric_limits<T>::min() && x <= std::numeric_limits<T>::max())
        v.push_back(static_cast<T>(x));
    } else {
      v.push_back(from_compute<T>(static_cast<Compute<T>>(x)));
    }
  };
  for (long double x : {0.0L,     -0.0L,    0.5L,     -0.5L,   1.5L,    2.5L,       -2.5L,  127.0L,
                        127.9L,   128.0L,   -128.0L,  -128.9L, -129.0L, 255.0L,     255.5L, 256.0L,
                        65504.0L, 65519.0L, 65520.0L, 2049.0L, 2051.0L, 16777217.0L})
    add(x);
  for (int e : {24, 31, 32, 53, 54, 62, 63, 64}) {
    const long double p = std::ldexp(1.0L, e);
    for (long double x : {p, -p, p - 1, -p + 1, p + 1, -p - 1}) add(x);
  }
  // i32/i64 values whose rounding to bf16 or f16 would differ if rounded twice.
  for (long double x :
       {16777216.0L + 65536.0L + 1.0L, std::ldexp(1.0L, 60) + std::ldexp(1.0L, 52) + 1,
        -(std::ldexp(1.0L, 40) + std::ldexp(1.0L, 32) + 1)})
    add(x);
  if constexpr (std::is_floating_point_v<Compute<T>>) {
    using C = Compute<T>;
    for (C x : special_floats<C>()) v.push_back(from_compute<T>(x));
  }
  if constexpr (std::is_same_v<T, double>) {
    // f64 values just off a bf16/f16 tie, and beyond f32's range.
    for (double x : {1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40),
                     1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -45), 1e300, -1e300, 1e-300,
                     std::ldexp(1.0, -149) * 0.75, 3.4028235677973366e38})
      v.push_back(x);
  }
  std::mt19937_64 rng(99);
  while (v.size() < 5000) v.push_back(random_element<T>(rng));
  return v;
}

class Cast : public PerIsa {};

TEST_P(Cast, EveryPairMatchesReference) {
  for (DataType src_type : kAllDataTypes) {
    visit_type(src_type, [&]<class S>(TypeTag<S>) {
      const std::vector<S> values = interesting_values<S>();
      Buffer src(src_type, values.size());
      for (size_t i = 0; i < values.size(); ++i) store(src.at(1), i, values[i]);
      for (DataType dst_type : kAllDataTypes) {
        visit_type(dst_type, [&]<class D>(TypeTag<D>) {
          Buffer expected(dst_type, values.size());
          for (size_t i = 0; i < values.size(); ++i)
            store(expected.at(0), i, ref_cast<D>(values[i]));
          for (size_t count : kCastCounts) {
            SCOPED_TRACE(::testing::Message() << to_string(src_type) << " -> "
                                              << to_string(dst_type) << " count " << count);
            Buffer dst(dst_type, count);
            kernels().cast(dst_type, dst.at(1), src_type, src.at(1), count);
            ASSERT_TRUE(same_elements(dst_type, expected.at(0), dst.at(1), count));
            if (sizeof(S) == sizeof(D)) {
              Buffer in_place = src;
              kernels().cast(dst_type, in_place.at(1), src_type, in_place.at(1), count);
              ASSERT_TRUE(same_elements(dst_type, expected.at(0), in_place.at(1), count))
                  << "in place";
            }
          }
        });
      }
    });
  }
}

// A -> B -> A is the identity whenever B represents every value of A.
TEST_P(Cast, LosslessRoundTrips) {
  struct Trip {
    DataType from, via;
  };
  const Trip trips[] = {{DataType::kF16, DataType::kF32},  {DataType::kF16, DataType::kF64},
                        {DataType::kBF16, DataType::kF32}, {DataType::kBF16, DataType::kF64},
                        {DataType::kF32, DataType::kF64},  {DataType::kI8, DataType::kF16},
                        {DataType::kI8, DataType::kBF16},  {DataType::kU8, DataType::kF16},
                        {DataType::kU8, DataType::kBF16},  {DataType::kI8, DataType::kI32},
                        {DataType::kI32, DataType::kF64},  {DataType::kI32, DataType::kI64},
                        {DataType::kU8, DataType::kI64}};
  for (const Trip& t : trips) {
    SCOPED_TRACE(::testing::Message() << to_string(t.from) << " -> " << to_string(t.via));
    // Every bit pattern for the 8- and 16-bit types, random ones for the rest.
    const size_t count = dtype_size(t.from) == 1 ? 256 : dtype_size(t.from) == 2 ? 65536 : 100000;
    Buffer src = random_buffer(t.from, count, 3);
    if (dtype_size(t.from) <= 2)
      for (size_t i = 0; i < count; ++i) std::memcpy(src.at(i), &i, dtype_size(t.from));
    Buffer mid(t.via, count), back(t.from, count);
    kernels().cast(t.via, mid.at(0), t.from, src.at(0), count);
    kernels().cast(t.from, back.at(0), t.via, mid.at(0), count);
    EXPECT_TRUE(same_elements(t.from, src.at(0), back.at(0), count));
  }
}

// f32 -> f16/bf16 must be bit-identical to chorus::float_to_half / float_to_bf16 on every ISA,
// NaN payloads included: random bit patterns plus a dense sweep of the f16 subnormal, normal and
// overflow boundaries.
TEST_P(Cast, NarrowingMatchesHalfHeaderBitForBit) {
  std::vector<float> in;
  std::mt19937 rng(7);
  for (int i = 0; i < 1 << 20; ++i)
    in.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  for (uint32_t base : {0x33000000u, 0x38800000u, 0x477fe000u})
    for (uint32_t d = 0; d < 1 << 16; ++d) {
      in.push_back(std::bit_cast<float>(base - (1u << 15) + d));
      in.push_back(-std::bit_cast<float>(base - (1u << 15) + d));
    }
  const size_t n = in.size();
  std::vector<uint16_t> half(n), bf16(n);
  kernels().cast(DataType::kF16, half.data(), DataType::kF32, in.data(), n);
  kernels().cast(DataType::kBF16, bf16.data(), DataType::kF32, in.data(), n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(half[i], float_to_half(in[i]))
        << "f32 bits 0x" << std::hex << std::bit_cast<uint32_t>(in[i]);
    ASSERT_EQ(bf16[i], float_to_bf16(in[i]))
        << "f32 bits 0x" << std::hex << std::bit_cast<uint32_t>(in[i]);
  }
}

TEST_P(Cast, FloatToIntegerTruncatesAndSaturates) {
  const float in[] = {-1.9f,
                      1.9f,
                      1e10f,
                      -1e10f,
                      std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity(),
                      2147483648.0f,
                      -2147483648.0f};
  int32_t out[8];
  kernels().cast(DataType::kI32, out, DataType::kF32, in, 8);
  const int32_t want[] = {-1, 1, INT32_MAX, INT32_MIN, 0, INT32_MAX, INT32_MAX, INT32_MIN};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], want[i]) << i;
  uint8_t out8[3];
  const double in8[] = {-3.0, 300.0, 254.99};
  kernels().cast(DataType::kU8, out8, DataType::kF64, in8, 3);
  EXPECT_EQ(out8[0], 0);
  EXPECT_EQ(out8[1], 255);
  EXPECT_EQ(out8[2], 254);
}

CHORUS_INSTANTIATE_PER_ISA(Cast);

}  // namespace
}  // namespace chorus::kernels::testing
