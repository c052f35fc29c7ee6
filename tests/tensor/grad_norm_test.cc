// The exact gradient norm's CPU passes (tensor/cpu/square_units.cc) against the grid's definition
// (optim/square_units.h) element by element: every dtype, sizes around the passes' blocks, values
// that end exactly on the grid's splits, a range down to subnormals, and every thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "chorus/tensor/gemm.h"
#include "chorus/tensor/optim.h"
#include "chorus/tensor/tensor.h"
#include "optim/square_units.h"
#include "runtime/thread_pool.h"

namespace chorus::tensor {
namespace {

using optim::U128;

// The definition: every element's square_halves added in 128 bits, one after another.
U128 reference_units(const std::vector<double>& x, int scale_exponent) {
  const double scale = std::ldexp(1.0, scale_exponent);
  U128 total = 0;
  for (double v : x) {
    const optim::SquareHalves h = optim::square_halves(v, scale);
    total += (static_cast<U128>(h.hi) << 64) + h.lo;
  }
  return total;
}

U128 from_limbs(const optim::SquareUnits& units) {
  U128 total = 0;
  for (size_t k = 0; k < units.size(); ++k)
    total += static_cast<U128>(static_cast<uint64_t>(units[k])) << (32 * k);
  return total;
}

// Values of every kind the passes split: a wide range of magnitudes (subnormal floats among
// them), exact powers of two and small integers (their squares end exactly on the grid's 2^64
// and 2^32 splits), zeros and negatives.
std::vector<double> values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-140, 10), kind(0, 9), small(-40, 40);
  std::vector<double> x(static_cast<size_t>(n));
  for (double& v : x) {
    switch (kind(rng)) {
      case 0:
        v = 0;
        break;
      case 1:
        v = std::ldexp(1.0, exponent(rng) / 4);
        break;
      case 2:
        v = small(rng);
        break;
      default:
        v = std::ldexp(mantissa(rng), exponent(rng)) * (kind(rng) < 5 ? 1 : -1);
    }
  }
  if (n > 0) x[static_cast<size_t>(n / 2)] = 1024.0;  // the largest, a power of two
  return x;
}

TEST(GradNorm, TheCpuPassesAddEverySquareOnTheGridExactly) {
  const int threads_before = pool_threads();
  for (const DataType dtype : {DataType::kF32, DataType::kF64, DataType::kBF16, DataType::kF16})
    for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{16383}, int64_t{16384},
                            int64_t{16385}, int64_t{100003}, (int64_t{1} << 20) + 3}) {
      // The dtype's own values (a cast of the doubles): the reference squares those.
      const std::vector<double> wide = values(n, static_cast<uint32_t>(n) + 17);
      const Tensor g = Tensor::from_vector(std::span<const double>(wide), {n}).to(dtype);
      const std::vector<double> x = g.to_vector();
      double want_max = 0;
      for (double v : x) want_max = std::max(want_max, std::fabs(v));
      for (const int threads : {1, 2}) {
        set_num_threads(threads);
        SCOPED_TRACE(std::string(to_string(dtype)) + " n=" + std::to_string(n) +
                     " threads=" + std::to_string(threads));
        const float max_abs = optim::grad_max_abs(g);
        ASSERT_EQ(max_abs, static_cast<float>(want_max));
        optim::SquareUnits units{};
        optim::add_squares(g, max_abs, units);
        if (n == 0) {
          EXPECT_EQ(from_limbs(units), U128{0});
          continue;
        }
        const U128 want = reference_units(x, optim::unit_scale_exponent(max_abs));
        EXPECT_TRUE(from_limbs(units) == want)
            << "units differ: high 64 bits " << static_cast<uint64_t>(from_limbs(units) >> 64)
            << " against " << static_cast<uint64_t>(want >> 64) << ", low "
            << static_cast<uint64_t>(from_limbs(units)) << " against "
            << static_cast<uint64_t>(want);
        double sum = 0;
        for (double v : x) sum += v * v;
        EXPECT_NEAR(optim::norm_of(units, max_abs), std::sqrt(sum), 1e-12 * std::sqrt(sum));
      }
    }
  set_num_threads(threads_before);
}

TEST(GradNorm, ANanOrInfiniteElementMakesTheLargestInfinite) {
  for (const double bad : {std::numeric_limits<double>::quiet_NaN(),
                           -std::numeric_limits<double>::infinity(), 1e300}) {
    std::vector<double> x(40000, 0.5);
    x[33333] = bad;  // in the third of the passes' blocks
    const Tensor g = Tensor::from_vector(std::span<const double>(x), {40000});
    EXPECT_EQ(optim::grad_max_abs(g), std::numeric_limits<float>::infinity()) << bad;
    EXPECT_EQ(optim::grad_max_abs(g.to(DataType::kF64)), std::numeric_limits<float>::infinity())
        << bad;
  }
}

}  // namespace
}  // namespace chorus::tensor
