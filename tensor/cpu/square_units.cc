#include "cpu/square_units.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "chorus/half.h"
#include "cpu/simd.h"

namespace chorus::tensor::cpu {
namespace {

constexpr int64_t kBlock = 1 << 14;

template <class T>
double as_double(T x) {
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<double>(x);
  else
    return static_cast<double>(static_cast<float>(x));
}

}  // namespace

template <class T>
float max_abs(const T* x, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<float> part(static_cast<size_t>(blocks), 0.f);
  parallel_for(blocks, kBlock, [&](int64_t b0, int64_t b1, int) {
    for (int64_t b = b0; b < b1; ++b) {
      float m = 0;
      for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
        const auto v = static_cast<float>(std::fabs(as_double(x[i])));
        m = v > m || std::isnan(v) ? (std::isnan(v) ? std::numeric_limits<float>::infinity() : v)
                                   : m;
      }
      part[static_cast<size_t>(b)] = m;
    }
  });
  float out = 0;
  for (float m : part) out = std::max(out, m);
  return out;
}

template <class T>
optim::U128 square_units(const T* x, int64_t n, int scale_exponent) {
  const double scale = std::ldexp(1.0, scale_exponent);
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<optim::U128> part(static_cast<size_t>(blocks), 0);
  parallel_for(blocks, 8 * kBlock, [&](int64_t b0, int64_t b1, int) {
    for (int64_t b = b0; b < b1; ++b) {
      optim::U128 acc = 0;
      for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
        const optim::SquareHalves h = optim::square_halves(as_double(x[i]), scale);
        acc += (static_cast<optim::U128>(h.hi) << 64) + h.lo;
      }
      part[static_cast<size_t>(b)] = acc;
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
