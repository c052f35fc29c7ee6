// The exact gradient norm's passes on CUDA (kernels.h; the grid: optim/square_units.h): per-block
// partials, then one block folding them, as reduce.cu does. The maximum and the integer sums do
// not depend on their order, so the results equal the CPU's bit for bit.
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/kernels.h"
#include "optim/square_units.h"

namespace chorus::tensor::cuda {
namespace {

constexpr int kPartials = 256;  // blocks of the first pass, at most
constexpr int kLimbs = 4;       // 32-bit limbs of a square's 128-bit units

int partials_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kPartials ? kPartials : blocks));
}

// |x| as the CPU takes it (cpu/square_units.cc): through double, rounded to float; NaN -> +inf.
template <class T>
__device__ __forceinline__ float abs_of(T x) {
  const float v = static_cast<float>(fabs(load_as<double>(x)));
  return isnan(v) ? INFINITY : v;
}

template <class T>
__global__ void max_abs_partials_kernel(float* partial, const T* x, int64_t n) {
  __shared__ float scratch[kWarp];
  float m = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = abs_of(x[i]);
    m = v > m ? v : m;
  }
  m = block_reduce<float, true>(m, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = m;
}

__global__ void max_abs_finish_kernel(float* result, const float* partial, int count) {
  __shared__ float scratch[kWarp];
  float m = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) m = partial[i] > m ? partial[i] : m;
  m = block_reduce<float, true>(m, scratch);
  if (threadIdx.x == 0) *result = m;
}

// partial[blockIdx.x * kLimbs + k] = the sum of limb k of this block's squares. A limb is below
// 2^32, so the sums stay exact for fewer than 2^32 elements (square_limbs' bound).
template <class T>
__global__ void square_partials_kernel(unsigned long long* partial, const T* x, int64_t n,
                                       double scale) {
  __shared__ unsigned long long scratch[kWarp];
  unsigned long long limb[kLimbs] = {0, 0, 0, 0};
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const optim::SquareHalves h = optim::square_halves(load_as<double>(x[i]), scale);
    limb[0] += h.lo & 0xFFFFFFFFull;
    limb[1] += h.lo >> 32;
    limb[2] += h.hi & 0xFFFFFFFFull;
    limb[3] += h.hi >> 32;
  }
  for (int k = 0; k < kLimbs; ++k) {
    const unsigned long long s = block_reduce(limb[k], scratch);
    if (threadIdx.x == 0) partial[blockIdx.x * kLimbs + k] = s;
  }
}

__global__ void square_finish_kernel(unsigned long long* result, const unsigned long long* partial,
                                     int count) {
  __shared__ unsigned long long scratch[kWarp];
  for (int k = 0; k < kLimbs; ++k) {
    unsigned long long s = 0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i * kLimbs + k];
    s = block_reduce(s, scratch);
    if (threadIdx.x == 0) result[k] = s;
  }
}

}  // namespace

size_t norm_scratch_bytes() { return kPartials * kLimbs * sizeof(unsigned long long); }

void max_abs(DataType dt, const void* x, int64_t n, float* result, void* scratch, Stream stream) {
  auto* partial = static_cast<float*>(scratch);
  const int blocks = partials_for(n);
  dispatch_float_any(dt, "gradient norm", [&](auto tag) {
    using T = decltype(tag);
    max_abs_partials_kernel<T>
        <<<blocks, kThreads, 0, native(stream)>>>(partial, static_cast<const T*>(x), n);
  });
  check_launch("max_abs");
  max_abs_finish_kernel<<<1, kThreads, 0, native(stream)>>>(result, partial, blocks);
  check_launch("max_abs");
}

void square_limbs(DataType dt, const void* x, int64_t n, double scale, uint64_t* result,
                  void* scratch, Stream stream) {
  CHORUS_ARG_CHECK(n < (int64_t{1} << 32), "square_limbs: ", n,
                   " elements in one pass (fewer than 2^32)");
  auto* partial = static_cast<unsigned long long*>(scratch);
  const int blocks = partials_for(n);
  dispatch_float_any(dt, "gradient norm", [&](auto tag) {
    using T = decltype(tag);
    square_partials_kernel<T>
        <<<blocks, kThreads, 0, native(stream)>>>(partial, static_cast<const T*>(x), n, scale);
  });
  check_launch("square_units");
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t));
  square_finish_kernel<<<1, kThreads, 0, native(stream)>>>(
      reinterpret_cast<unsigned long long*>(result), partial, blocks);
  check_launch("square_units");
}

}  // namespace chorus::tensor::cuda
