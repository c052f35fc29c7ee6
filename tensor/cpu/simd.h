// Internal: helpers for kernels the compiler vectorises, and their runtime ISA dispatch.
//
// Hot float kernels are plain loops over row ranges wrapped in CHORUS_TARGET_CLONES functions:
// GCC compiles each for AVX-512, x86-64-v3 (AVX2 with FMA, as every AVX2 CPU since Haswell and
// Zen has; a list "avx2,fma" would make two clones, neither with both) and baseline x86-64, and
// an ifunc resolver picks one at load time, so the library runs on any x86-64 without -march
// flags. Parallel regions (parallel_for, on the tensor thread team of runtime/thread_pool.h) stay
// outside the cloned functions, so each clone is a plain loop over its piece.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/thread_pool.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define CHORUS_TARGET_CLONES __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
#else
#define CHORUS_TARGET_CLONES
#endif
#define CHORUS_INLINE inline __attribute__((always_inline))

namespace chorus::tensor {

// Splits [0, n) into one contiguous range per thread and calls f(begin, end, chunk) on each;
// runs inline when the work (n * cost) is too small to pay for waking the team.
template <class F>
void parallel_for(int64_t n, int64_t cost_per_item, F&& f) {
  const int max_threads = pool_threads();
  if (n <= 1 || max_threads <= 1 || n * cost_per_item < (int64_t{1} << 15) || in_pool_task()) {
    f(int64_t{0}, n, 0);
    return;
  }
  const int teams = static_cast<int>(std::min<int64_t>(max_threads, n));
  auto task = [&](int t) {
    const int64_t b = n * t / teams, e = n * (t + 1) / teams;
    if (b < e) f(b, e, t);
  };
  pool_run(teams, TaskRef(task));
}

// exp for float, branch-free so loops over it vectorise: Cody-Waite reduction x = n ln2 + r,
// degree-6 polynomial for e^r on |r| <= ln2/2, scale by 2^n through the exponent bits.
// Max relative error ~2 ulp on [-87.3, 88.4]; clamps outside (tiny below, ~2.4e38 above).
CHORUS_INLINE float fast_exp(float x) {
  x = x < -87.33654f ? -87.33654f : x;
  x = x > 88.37626f ? 88.37626f : x;  // n <= 127: a finite scale
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float n = x * 1.44269504088896341f + shifter;
  n -= shifter;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * r * r + r + 1.0f;
  const int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, sizeof(scale));
  return p * scale;
}

// tanh through exp: 1 - 2 / (e^{2x} + 1); absolute error ~1e-7.
CHORUS_INLINE float fast_tanh(float x) { return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f); }

// The compute-type overloads kernels call: fast for float, libm for double (gradient checks).
CHORUS_INLINE float k_exp(float x) { return fast_exp(x); }
CHORUS_INLINE double k_exp(double x) { return std::exp(x); }
CHORUS_INLINE float k_tanh(float x) { return fast_tanh(x); }
CHORUS_INLINE double k_tanh(double x) { return std::tanh(x); }

}  // namespace chorus::tensor
