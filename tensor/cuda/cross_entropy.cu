// The cross-entropy pieces of the CUDA backend (kernels.h), as cpu/softmax.cc computes them: one
// block per row; the loss folds the rows in double in one block.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace chorus::tensor::cuda {
namespace {

template <class T>
__global__ void row_max_kernel(T* out, const T* logits, int64_t V) {
  __shared__ T scratch[kWarp];
  const T* xr = logits + blockIdx.x * V;
  T m = xr[0];
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) m = xr[v] > m ? xr[v] : m;
  m = block_reduce<T, true>(m, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = m;
}

template <class T, class I>
__global__ void exp_sums_kernel(T* sums, const T* logits, const T* rmax, const I* targets,
                                int64_t vocab_start, int64_t V) {
  __shared__ T scratch[kWarp];
  const int64_t r = blockIdx.x;
  const T* xr = logits + r * V;
  const T m = rmax[r];
  T s = 0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) s += exp_of(xr[v] - m);
  s = block_reduce(s, scratch);
  if (threadIdx.x == 0) {
    const int64_t t = static_cast<int64_t>(targets[r]) - vocab_start;
    sums[2 * r] = s;
    sums[2 * r + 1] = (t >= 0 && t < V) ? xr[t] : T(0);
  }
}

template <class T>
__global__ void loss_kernel(T* loss, const T* sums, const T* rmax, int64_t N) {
  __shared__ double scratch[kWarp];
  double acc = 0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x)
    acc += ::log(double(sums[2 * n])) + double(rmax[n]) - double(sums[2 * n + 1]);
  acc = block_reduce(acc, scratch);
  if (threadIdx.x == 0) loss[0] = static_cast<T>(acc / static_cast<double>(N));
}

template <class T, class I>
__global__ void backward_kernel(T* dlogits, const T* logits, const T* rmax, const T* sums,
                                const I* targets, int64_t vocab_start, int64_t N, int64_t V,
                                const T* dloss) {
  const int64_t r = blockIdx.x;
  const T scale = static_cast<T>(double(dloss[0]) / static_cast<double>(N));
  const T k = scale / sums[2 * r];
  const T m = rmax[r];
  const int64_t t = static_cast<int64_t>(targets[r]) - vocab_start;
  const T* xr = logits + r * V;
  T* dr = dlogits + r * V;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    T d = dr[v] + exp_of(xr[v] - m) * k;
    if (v == t) d -= scale;
    dr[v] = d;
  }
}

unsigned rows_grid(int64_t rows) {
  CHORUS_ARG_CHECK(rows < (int64_t{1} << 31), "CUDA cross_entropy: ", rows, " rows");
  return static_cast<unsigned>(rows);
}

}  // namespace

void row_max(DataType dt, void* row_max, const void* logits, int64_t N, int64_t V, Stream stream) {
  if (N == 0 || V == 0) return;
  dispatch_float(dt, "row_max", [&](auto tag) {
    using T = decltype(tag);
    row_max_kernel<T><<<rows_grid(N), kThreads, 0, native(stream)>>>(
        static_cast<T*>(row_max), static_cast<const T*>(logits), V);
  });
  check_launch("row_max");
}

void exp_sums_and_target(DataType dt, DataType idt, void* sums, const void* logits,
                         const void* row_max, const void* targets, int64_t vocab_start, int64_t N,
                         int64_t V, Stream stream) {
  if (N == 0) return;
  dispatch_float(dt, "exp_sums_and_target", [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(idt, "exp_sums_and_target", [&](auto itag) {
      using I = decltype(itag);
      exp_sums_kernel<T, I><<<rows_grid(N), kThreads, 0, native(stream)>>>(
          static_cast<T*>(sums), static_cast<const T*>(logits), static_cast<const T*>(row_max),
          static_cast<const I*>(targets), vocab_start, V);
    });
  });
  check_launch("exp_sums_and_target");
}

void cross_entropy_loss(DataType dt, void* loss, const void* sums, const void* row_max, int64_t N,
                        Stream stream) {
  dispatch_float(dt, "cross_entropy_loss", [&](auto tag) {
    using T = decltype(tag);
    loss_kernel<T><<<1, kThreads, 0, native(stream)>>>(
        static_cast<T*>(loss), static_cast<const T*>(sums), static_cast<const T*>(row_max), N);
  });
  check_launch("cross_entropy_loss");
}

void cross_entropy_backward(DataType dt, DataType idt, void* dlogits, const void* logits,
                            const void* row_max, const void* sums, const void* targets,
                            int64_t vocab_start, int64_t N, int64_t V, const void* dloss,
                            Stream stream) {
  if (N == 0 || V == 0) return;
  dispatch_float(dt, "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(idt, "cross_entropy_backward", [&](auto itag) {
      using I = decltype(itag);
      backward_kernel<T, I><<<rows_grid(N), kThreads, 0, native(stream)>>>(
          static_cast<T*>(dlogits), static_cast<const T*>(logits), static_cast<const T*>(row_max),
          static_cast<const T*>(sums), static_cast<const I*>(targets), vocab_start, N, V,
          static_cast<const T*>(dloss));
    });
  });
  check_launch("cross_entropy_backward");
}

}  // namespace chorus::tensor::cuda
