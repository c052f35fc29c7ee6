#include "cpu/square_units.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "chorus/half.h"
#include "cpu/simd.h"

namespace chorus::tensor::cpu {
namespace {

constexpr int64_t kBlock = 1 << 14;

template <class T>
CHORUS_INLINE double as_double(T x) {
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<double>(x);
  else
    return static_cast<double>(static_cast<float>(x));
}

// The largest |x[i]| of a piece as a float's bits: |x| as a float (a NaN stays one, a double
// beyond float's range becomes inf) orders as its bits do, every NaN's above inf's; an integer
// maximum has no branch, so the loop vectorises.
template <class T>
CHORUS_INLINE uint32_t max_abs_bits(const T* x, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = std::bit_cast<uint32_t>(static_cast<float>(as_double(x[i]))) & 0x7fffffffu;
    m = b > m ? b : m;
  }
  return m;
}

// floor(x) for 0 <= x < 2^52, as a double and as an integer (AVX2 has no conversion of a double
// to a 64-bit integer), with no branch, call or float comparison, so the loops vectorise whatever
// the trapping-math flags: x + 2^52 is x rounded to an integer in the mantissa's low bits, one
// too many where that rounded up (in any rounding mode), which non-negative doubles' bits,
// compared as integers, tell.
struct Floor {
  double value;
  uint64_t integer;
};
CHORUS_INLINE Floor floor_small(double x) {
  const double t = x + 0x1p52, rounded = t - 0x1p52;
  const int64_t up =
      std::bit_cast<int64_t>(rounded) > std::bit_cast<int64_t>(x) ? int64_t{1} : int64_t{0};
  const double one = std::bit_cast<double>(-up & std::bit_cast<int64_t>(1.0));
  return {rounded - one,
          (std::bit_cast<uint64_t>(t) & ((uint64_t{1} << 52) - 1)) - static_cast<uint64_t>(up)};
}

// A piece's units (square_units), every element's square split three ways and each part summed
// apart, branch-free so the loop vectorises: u = v^2 2^s (below 2^kUnitBits = 2^78) is
// hi 2^64 + lo with hi = floor(u 2^-64) < 2^14 and lo exact (optim::square_halves), and lo's
// integer part is b 2^32 + floor(c) with b = floor(lo 2^-32) < 2^32 and c = lo - b 2^32 exact
// (lo is a multiple of its ulp, at most 2^11, and so is b 2^32). The three sums of a piece of
// kBlock elements stay below 2^28, 2^46 and 2^46: the same integer as adding square_halves' two
// halves element by element, in any order.
template <class T>
CHORUS_INLINE optim::U128 square_units_loop(const T* x, int64_t n, double scale) {
  uint64_t his = 0, mids = 0, lows = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = as_double(x[i]);
    const double u = v * v * scale;
    const Floor hi = floor_small(u * 0x1p-64);
    const double lo = u - hi.value * 0x1p64;
    const Floor b = floor_small(lo * 0x1p-32);
    his += hi.integer;
    mids += b.integer;
    lows += floor_small(lo - b.value * 0x1p32).integer;
  }
  return (static_cast<optim::U128>(his) << 64) + (static_cast<optim::U128>(mids) << 32) + lows;
}

// f32 clones (gradients are f32 but for 16-bit training without master weights).
CHORUS_TARGET_CLONES uint32_t max_abs_f32(const float* x, int64_t n) { return max_abs_bits(x, n); }
CHORUS_TARGET_CLONES optim::U128 square_units_f32(const float* x, int64_t n, double scale) {
  return square_units_loop(x, n, scale);
}
template <class T>
uint32_t max_abs_piece(const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    return max_abs_f32(x, n);
  else
    return max_abs_bits(x, n);
}
template <class T>
optim::U128 square_units_piece(const T* x, int64_t n, double scale) {
  if constexpr (std::is_same_v<T, float>)
    return square_units_f32(x, n, scale);
  else
    return square_units_loop(x, n, scale);
}

}  // namespace

template <class T>
float max_abs(const T* x, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<uint32_t> part(static_cast<size_t>(blocks), 0);
  parallel_for(blocks, kBlock, [&](int64_t b0, int64_t b1, int) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t at = b * kBlock;
      part[static_cast<size_t>(b)] = max_abs_piece(x + at, std::min(n - at, kBlock));
    }
  });
  const uint32_t out = part.empty() ? 0 : *std::max_element(part.begin(), part.end());
  // A NaN's bits lie above inf's: reported as inf.
  return out > 0x7f800000u ? std::numeric_limits<float>::infinity() : std::bit_cast<float>(out);
}

template <class T>
optim::U128 square_units(const T* x, int64_t n, int scale_exponent) {
  const double scale = std::ldexp(1.0, scale_exponent);
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<optim::U128> part(static_cast<size_t>(blocks), 0);
  parallel_for(blocks, kBlock, [&](int64_t b0, int64_t b1, int) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t at = b * kBlock;
      part[static_cast<size_t>(b)] = square_units_piece(x + at, std::min(n - at, kBlock), scale);
    }
  });
  optim::U128 total = 0;
  for (optim::U128 p : part) total += p;
  return total;
}

#define CHORUS_SQUARE_UNITS(T)                  \
  template float max_abs<T>(const T*, int64_t); \
  template optim::U128 square_units<T>(const T*, int64_t, int);
CHORUS_SQUARE_UNITS(float)
CHORUS_SQUARE_UNITS(double)
CHORUS_SQUARE_UNITS(Half)
CHORUS_SQUARE_UNITS(BFloat16)
#undef CHORUS_SQUARE_UNITS

}  // namespace chorus::tensor::cpu
