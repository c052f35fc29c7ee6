// chorus — inputs, buffers and bitwise comparison shared by the kernel tests, and the fixture that
// runs a test once per instruction set this CPU supports.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "dispatch.h"
#include "reference.h"

namespace chorus::kernels::detail {
// So gtest prints "avx2" rather than the enum's bytes.
inline void PrintTo(Isa isa, std::ostream* os) { *os << to_string(isa); }
}  // namespace chorus::kernels::detail

namespace chorus::kernels::testing {

using detail::Isa;
using detail::IsaKernels;

// Counts every reduce/divide test covers: empty, below, at and past vector widths, and one large
// count that is not a multiple of anything.
inline constexpr size_t kCounts[] = {
    0, 1, 7, 15, 16, 17, 31, 33, 1000, 4099, (size_t{1} << 20) | 3};
inline constexpr size_t kMaxCount = (size_t{1} << 20) | 3;

// Raw bytes of `count` elements plus slack, so tests can offset pointers by whole elements.
struct Buffer {
  Buffer(DataType t, size_t count) : dtype(t), bytes((count + 8) * dtype_size(t)) {}
  void* at(size_t element) { return bytes.data() + element * dtype_size(dtype); }
  const void* at(size_t element) const { return bytes.data() + element * dtype_size(dtype); }
  DataType dtype;
  std::vector<unsigned char> bytes;
};

// Floats worth testing beyond random ones.
template <class F>
std::vector<F> special_floats() {
  using L = std::numeric_limits<F>;
  return {L::quiet_NaN(),  -L::quiet_NaN(),  L::infinity(), -L::infinity(), F(0),      -F(0),
          L::denorm_min(), -L::denorm_min(), L::min(),      L::max(),       -L::max(), F(1),
          F(-1),           F(0.5),           F(-2.5),       F(65504),       F(65520),  F(-65536)};
}

template <class T>
T random_element(std::mt19937_64& rng) {
  const uint64_t bits = rng();
  if constexpr (std::is_integral_v<T>) {
    // Mostly any value (sums and products wrap), sometimes an extreme.
    static const T kExtremes[] = {std::numeric_limits<T>::min(), std::numeric_limits<T>::max(),
                                  T(0), T(1), static_cast<T>(-1)};
    if (bits % 8 == 0) return kExtremes[(bits >> 8) % 5];
    return static_cast<T>(bits >> 3);
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    // Half any bit pattern (NaNs, infinities, subnormals included), half moderate values so
    // rounding of sums and products is exercised.
    if (bits & 1) return T::from_bits(static_cast<uint16_t>(bits >> 16));
    const float f = std::ldexp(static_cast<float>((bits >> 8) % 2048) / 1024.0f - 1.0f,
                               static_cast<int>((bits >> 32) % 9) - 4);
    return from_compute<T>(f);
  } else {
    static const std::vector<T> kSpecial = special_floats<T>();
    if (bits % 16 == 0) return kSpecial[(bits >> 8) % kSpecial.size()];
    const T mantissa = static_cast<T>(bits >> 11) * std::ldexp(T(1), -53) * 2 - 1;  // [-1, 1)
    return std::ldexp(mantissa, static_cast<int>(bits % 11) - 5);
  }
}

inline Buffer random_buffer(DataType dtype, size_t count, uint64_t seed) {
  Buffer buf(dtype, count);
  std::mt19937_64 rng(seed);
  visit_type(dtype, [&]<class T>(TypeTag<T>) {
    for (size_t i = 0; i < count + 8; ++i) store(buf.at(0), i, random_element<T>(rng));
  });
  return buf;
}

template <class T>
bool is_nan_element(T v) {
  if constexpr (std::is_integral_v<T>)
    return false;
  else
    return std::isnan(to_compute(v));
}

template <class T>
std::string element_string(T v) {
  std::ostringstream os;
  if constexpr (std::is_integral_v<T>) {
    os << +v;
  } else {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    os << to_compute(v) << " (0x" << std::hex << bits << ")";
  }
  return os.str();
}

// Bitwise equality of `count` elements; any NaN matches any NaN (payloads are not specified).
inline ::testing::AssertionResult same_elements(DataType dtype, const void* expected,
                                                const void* actual, size_t count) {
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  visit_type(dtype, [&]<class T>(TypeTag<T>) {
    for (size_t i = 0; i < count; ++i) {
      const T e = load<T>(expected, i);
      const T a = load<T>(actual, i);
      if (std::memcmp(&e, &a, sizeof(T)) == 0) continue;
      if (is_nan_element(e) && is_nan_element(a)) continue;
      result = ::testing::AssertionFailure() << "element " << i << " of " << count << ": expected "
                                             << element_string(e) << ", got " << element_string(a);
      return;
    }
  });
  return result;
}

// Runs each TEST_P once per instruction set this CPU supports, calling its table directly.
class PerIsa : public ::testing::TestWithParam<Isa> {
 protected:
  const IsaKernels& kernels() const { return detail::kernels_for(GetParam()); }
};

inline std::string isa_test_name(const ::testing::TestParamInfo<Isa>& info) {
  return std::string(detail::to_string(info.param));
}

#define CHORUS_INSTANTIATE_PER_ISA(suite) \
  INSTANTIATE_TEST_SUITE_P(Isa, suite, ::testing::ValuesIn(detail::supported_isas()), isa_test_name)

}  // namespace chorus::kernels::testing
