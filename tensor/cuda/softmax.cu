// Softmax over rows, and the causal softmax of attention (kernels.h), as cpu/softmax.cc and
// cpu/attention.cc compute them: one block per row, the row max, exponentials, their sum, then
// the scaling by its inverse.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace chorus::tensor::cuda {
namespace {

// y (row of V) = softmax of x over its first `len` entries; entries [len, V) = 0.
template <class T>
__device__ void softmax_row(T* y, const T* x, int64_t len, int64_t V, T* scratch) {
  T m = len > 0 ? x[0] : T(0);
  for (int64_t v = threadIdx.x; v < len; v += blockDim.x) m = x[v] > m ? x[v] : m;
  m = block_reduce<T, true>(m, scratch);
  T s = 0;
  for (int64_t v = threadIdx.x; v < len; v += blockDim.x) {
    const T e = exp_of(x[v] - m);
    y[v] = e;
    s += e;
  }
  const T inv = T(1) / block_reduce(s, scratch);
  for (int64_t v = threadIdx.x; v < len; v += blockDim.x) y[v] *= inv;
  for (int64_t v = len + threadIdx.x; v < V; v += blockDim.x) y[v] = T(0);
}

template <class T>
__global__ void softmax_kernel(T* y, const T* x, int64_t V) {
  __shared__ T scratch[kWarp];
  const int64_t r = blockIdx.x;
  softmax_row(y + r * V, x + r * V, V, V, scratch);
}

// dx += y * (dy - sum(dy * y)) per row.
template <class T>
__global__ void softmax_backward_kernel(T* dx, const T* y, const T* dy, int64_t V) {
  __shared__ T scratch[kWarp];
  const int64_t r = blockIdx.x;
  const T* yr = y + r * V;
  const T* gr = dy + r * V;
  T dot = 0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) dot += yr[v] * gr[v];
  dot = block_reduce(dot, scratch);
  T* dr = dx + r * V;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) dr[v] += yr[v] * (gr[v] - dot);
}

// Row r of the stacked squares is row t = r % T of its square: columns [0, t] are softmaxed.
template <class T>
__global__ void causal_softmax_kernel(T* att, int64_t T_) {
  __shared__ T scratch[kWarp];
  const int64_t r = blockIdx.x;
  T* row = att + r * T_;
  softmax_row(row, row, r % T_ + 1, T_, scratch);
}

// dp = p * (dp - sum(p * dp)) * scale per row (all T columns; p is 0 above the diagonal).
template <class T>
__global__ void softmax_grad_kernel(T* dp, const T* p, int64_t T_, T scale) {
  __shared__ T scratch[kWarp];
  const int64_t r = blockIdx.x;
  T* d = dp + r * T_;
  const T* pr = p + r * T_;
  T dot = 0;
  for (int64_t s = threadIdx.x; s < T_; s += blockDim.x) dot += pr[s] * d[s];
  dot = block_reduce(dot, scratch);
  for (int64_t s = threadIdx.x; s < T_; s += blockDim.x) d[s] = pr[s] * (d[s] - dot) * scale;
}

// Rows are blocks; a grid's x dimension holds 2^31 - 1 of them.
unsigned rows_grid(int64_t rows) {
  CHORUS_ARG_CHECK(rows < (int64_t{1} << 31), "CUDA softmax: ", rows, " rows");
  return static_cast<unsigned>(rows);
}

}  // namespace

void softmax_forward(DataType dt, void* y, const void* x, int64_t N, int64_t V, Stream stream) {
  if (N == 0 || V == 0) return;
  dispatch_float(dt, "softmax_forward", [&](auto tag) {
    using T = decltype(tag);
    softmax_kernel<T><<<rows_grid(N), kThreads, 0, native(stream)>>>(static_cast<T*>(y),
                                                                     static_cast<const T*>(x), V);
  });
  check_launch("softmax_forward");
}

void softmax_backward(DataType dt, void* dx, const void* y, const void* dy, int64_t N, int64_t V,
                      Stream stream) {
  if (N == 0 || V == 0) return;
  dispatch_float(dt, "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_kernel<T><<<rows_grid(N), kThreads, 0, native(stream)>>>(
        static_cast<T*>(dx), static_cast<const T*>(y), static_cast<const T*>(dy), V);
  });
  check_launch("softmax_backward");
}

void causal_softmax(DataType dt, void* att, int64_t squares, int64_t T, Stream stream) {
  if (squares == 0 || T == 0) return;
  dispatch_float(dt, "causal_softmax", [&](auto tag) {
    using E = decltype(tag);
    causal_softmax_kernel<E>
        <<<rows_grid(squares * T), kThreads, 0, native(stream)>>>(static_cast<E*>(att), T);
  });
  check_launch("causal_softmax");
}

void softmax_grad(DataType dt, void* dp, const void* p, int64_t squares, int64_t T, double scale,
                  Stream stream) {
  if (squares == 0 || T == 0) return;
  dispatch_float(dt, "softmax_grad", [&](auto tag) {
    using E = decltype(tag);
    softmax_grad_kernel<E><<<rows_grid(squares * T), kThreads, 0, native(stream)>>>(
        static_cast<E*>(dp), static_cast<const E*>(p), T, E(scale));
  });
  check_launch("softmax_grad");
}

}  // namespace chorus::tensor::cuda
