// A mixture of experts' routing kernels on CUDA (kernels.h): row scaling and the log-sum-exp of
// the router's logits. One thread per row runs the CPU's loops in the CPU's order
// (cpu/backend_routing.cc), so the results are the CPU's bits where the arithmetic is exact
// (scaling) and within exp/log's rounding otherwise; no atomics.
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace chorus::tensor::cuda {
namespace {

int64_t row_blocks(int64_t rows) { return (rows + kThreads - 1) / kThreads; }

template <class T>
__global__ void scale_rows_kernel(T* out, const T* x, const T* s, int64_t M, int64_t C) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= M * C) return;
  out[i] = x[i] * s[i / C];
}

template <class T>
__global__ void scale_rows_backward_kernel(T* dx, T* ds, const T* x, const T* s, const T* dy,
                                           int64_t M, int64_t C) {
  const int64_t m = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (m >= M) return;
  if (dx != nullptr)
    for (int64_t c = 0; c < C; ++c) dx[m * C + c] += dy[m * C + c] * s[m];
  if (ds != nullptr) {
    double acc = 0;
    for (int64_t c = 0; c < C; ++c)
      acc += static_cast<double>(dy[m * C + c]) * static_cast<double>(x[m * C + c]);
    ds[m] += static_cast<T>(acc);
  }
}

template <class T>
__global__ void logsumexp_kernel(T* out, const T* x, int64_t N, int64_t V) {
  const int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (n >= N) return;
  double mx = -INFINITY;
  for (int64_t v = 0; v < V; ++v) mx = fmax(mx, static_cast<double>(x[n * V + v]));
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += exp(static_cast<double>(x[n * V + v]) - mx);
  out[n] = static_cast<T>(mx + log(sum));
}

template <class T>
__global__ void logsumexp_backward_kernel(T* dx, const T* x, const T* out, const T* dy, int64_t N,
                                          int64_t V) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= N * V) return;
  const int64_t n = i / V;
  dx[i] += static_cast<T>(exp(static_cast<double>(x[i]) - static_cast<double>(out[n])) *
                          static_cast<double>(dy[n]));
}

}  // namespace

void scale_rows(DataType dt, void* out, const void* x, const void* s, int64_t M, int64_t C,
                Stream stream) {
  if (M * C == 0) return;
  dispatch_float(dt, "scale_rows", [&](auto tag) {
    using T = decltype(tag);
    scale_rows_kernel<T><<<static_cast<unsigned>(row_blocks(M * C)), kThreads, 0, native(stream)>>>(
        static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(s), M, C);
  });
  check_launch("scale_rows");
}

void scale_rows_backward(DataType dt, void* dx, void* ds, const void* x, const void* s,
                         const void* dy, int64_t M, int64_t C, Stream stream) {
  if (M == 0) return;
  dispatch_float(dt, "scale_rows backward", [&](auto tag) {
    using T = decltype(tag);
    scale_rows_backward_kernel<T>
        <<<static_cast<unsigned>(row_blocks(M)), kThreads, 0, native(stream)>>>(
            static_cast<T*>(dx), static_cast<T*>(ds), static_cast<const T*>(x),
            static_cast<const T*>(s), static_cast<const T*>(dy), M, C);
  });
  check_launch("scale_rows backward");
}

void logsumexp_forward(DataType dt, void* out, const void* x, int64_t N, int64_t V, Stream stream) {
  if (N == 0) return;
  dispatch_float(dt, "logsumexp", [&](auto tag) {
    using T = decltype(tag);
    logsumexp_kernel<T><<<static_cast<unsigned>(row_blocks(N)), kThreads, 0, native(stream)>>>(
        static_cast<T*>(out), static_cast<const T*>(x), N, V);
  });
  check_launch("logsumexp");
}

void logsumexp_backward(DataType dt, void* dx, const void* x, const void* out, const void* dy,
                        int64_t N, int64_t V, Stream stream) {
  if (N * V == 0) return;
  dispatch_float(dt, "logsumexp backward", [&](auto tag) {
    using T = decltype(tag);
    logsumexp_backward_kernel<T>
        <<<static_cast<unsigned>(row_blocks(N * V)), kThreads, 0, native(stream)>>>(
            static_cast<T*>(dx), static_cast<const T*>(x), static_cast<const T*>(out),
            static_cast<const T*>(dy), N, V);
  });
  check_launch("logsumexp backward");
}

}  // namespace chorus::tensor::cuda
