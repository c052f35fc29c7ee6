// LayerNorm of the CUDA backend (kernels.h), the formulas of cpu/layernorm.cc: one block per row
// for the row statistics and dx, and the weight and bias gradients as column sums in two passes
// (row groups, then the groups in order).
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace chorus::tensor::cuda {
namespace {

constexpr int64_t kRowsPerGroup = 64;

int64_t groups_for(int64_t N) { return (N + kRowsPerGroup - 1) / kRowsPerGroup; }

template <class T>
__global__ void forward_kernel(T* out, T* mean, T* rstd, const T* x, const T* w, const T* b,
                               int64_t C, T eps) {
  __shared__ T scratch[kWarp];
  const int64_t r = blockIdx.x;
  const T* xr = x + r * C;
  T acc = 0;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) acc += xr[i];
  const T m = block_reduce(acc, scratch) / T(C);
  acc = 0;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) acc += (xr[i] - m) * (xr[i] - m);
  const T v = block_reduce(acc, scratch) / T(C);
  const T s = T(1) / sqrt_of(v + eps);
  T* o = out + r * C;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) o[i] = (xr[i] - m) * s * w[i] + b[i];
  if (threadIdx.x == 0) {
    mean[r] = m;
    rstd[r] = s;
  }
}

template <class T>
__global__ void dx_kernel(T* dx, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                          int64_t C) {
  __shared__ T scratch[kWarp];
  const int64_t r = blockIdx.x;
  const T* xr = x + r * C;
  const T* g = dy + r * C;
  const T m = mean[r], s = rstd[r];
  T a = 0, b = 0;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const T norm = (xr[i] - m) * s;
    const T dnorm = w[i] * g[i];
    a += dnorm;
    b += dnorm * norm;
  }
  const T dnorm_mean = block_reduce(a, scratch) / T(C);
  const T dnorm_norm_mean = block_reduce(b, scratch) / T(C);
  T* d = dx + r * C;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const T norm = (xr[i] - m) * s;
    d[i] += (w[i] * g[i] - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// partial[(2 g) * C + c] = sum over group g's rows of norm * dy, partial[(2 g + 1) * C + c] of dy.
template <class T>
__global__ void wb_partials_kernel(T* partial, const T* dy, const T* x, const T* mean,
                                   const T* rstd, int64_t N, int64_t C) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t grp = blockIdx.y;
  if (c >= C) return;
  const int64_t r0 = grp * kRowsPerGroup;
  const int64_t r1 = r0 + kRowsPerGroup < N ? r0 + kRowsPerGroup : N;
  T aw = 0, ab = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const T g = dy[r * C + c];
    aw += (x[r * C + c] - mean[r]) * rstd[r] * g;
    ab += g;
  }
  partial[(2 * grp) * C + c] = aw;
  partial[(2 * grp + 1) * C + c] = ab;
}

template <class T>
__global__ void wb_finish_kernel(T* dw, T* db, const T* partial, int64_t groups, int64_t C) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  T aw = 0, ab = 0;
  for (int64_t g = 0; g < groups; ++g) {
    aw += partial[(2 * g) * C + c];
    ab += partial[(2 * g + 1) * C + c];
  }
  if (dw != nullptr) dw[c] += aw;
  if (db != nullptr) db[c] += ab;
}

}  // namespace

void layernorm_forward(DataType dt, void* out, void* mean, void* rstd, const void* x,
                       const void* weight, const void* bias, int64_t N, int64_t C, double eps,
                       Stream stream) {
  if (N == 0) return;
  dispatch_float(dt, "layernorm_forward", [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, native(stream)>>>(
        static_cast<T*>(out), static_cast<T*>(mean), static_cast<T*>(rstd),
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias), C,
        T(eps));
  });
  check_launch("layernorm_forward");
}

size_t layernorm_scratch_bytes(DataType dt, int64_t N, int64_t C) {
  return static_cast<size_t>(2 * groups_for(N) * C) * dtype_size(dt) + 1;
}

void layernorm_backward(DataType dt, void* dx, void* dweight, void* dbias, const void* dy,
                        const void* x, const void* weight, const void* mean, const void* rstd,
                        int64_t N, int64_t C, void* scratch, Stream stream) {
  if (N == 0 || C == 0) return;
  dispatch_float(dt, "layernorm_backward", [&](auto tag) {
    using T = decltype(tag);
    const auto* g = static_cast<const T*>(dy);
    const auto* xp = static_cast<const T*>(x);
    const auto* m = static_cast<const T*>(mean);
    const auto* s = static_cast<const T*>(rstd);
    if (dx != nullptr) {
      dx_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, native(stream)>>>(
          static_cast<T*>(dx), g, xp, static_cast<const T*>(weight), m, s, C);
      check_launch("layernorm_backward");
    }
    if (dweight == nullptr && dbias == nullptr) return;
    const int64_t groups = groups_for(N);
    const unsigned col_blocks = static_cast<unsigned>((C + kThreads - 1) / kThreads);
    auto* partial = static_cast<T*>(scratch);
    wb_partials_kernel<T>
        <<<dim3(col_blocks, static_cast<unsigned>(groups)), kThreads, 0, native(stream)>>>(
            partial, g, xp, m, s, N, C);
    check_launch("layernorm_backward");
    wb_finish_kernel<T><<<col_blocks, kThreads, 0, native(stream)>>>(
        static_cast<T*>(dweight), static_cast<T*>(dbias), partial, groups, C);
  });
  check_launch("layernorm_backward");
}

}  // namespace chorus::tensor::cuda
