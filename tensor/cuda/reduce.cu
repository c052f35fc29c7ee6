// Reductions of the CUDA backend (kernels.h), in two passes without atomics: per-block partials
// in an order fixed by the sizes, then one block (or one thread per column) folding them in
// order. Sums of a tensor run in double, as the CPU's do.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace chorus::tensor::cuda {
namespace {

constexpr int kPartials = 256;         // blocks of the first pass, at most
constexpr int64_t kRowsPerGroup = 64;  // rows one thread folds in a column sum's first pass

int partials_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kPartials ? kPartials : blocks));
}

// partial[blockIdx.x] = sum over this block's grid-stride elements of x (or x^2), in double.
template <class T, bool kSquares>
__global__ void partial_sums_kernel(double* partial, const T* x, int64_t n) {
  __shared__ double scratch[kWarp];
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double v = static_cast<double>(x[i]);
    acc += kSquares ? v * v : v;
  }
  acc = block_reduce(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// One block: total = sum of partial[0, count) (grid-stride over threads, then the block).
__device__ double fold(const double* partial, int64_t count) {
  __shared__ double scratch[kWarp];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  return block_reduce(acc, scratch);
}

template <class T>
__global__ void finish_sum_kernel(T* out, const double* partial, int64_t count, double factor) {
  const double total = fold(partial, count);
  if (threadIdx.x == 0) out[0] = static_cast<T>(total * factor);
}

__global__ void finish_squares_kernel(double* result, const double* partial, int64_t count) {
  const double total = fold(partial, count);
  if (threadIdx.x == 0) *result = total;
}

// Pass 1 of column sums: partial[g * C + c] = sum of in[r, c] over the rows of group g.
template <class T>
__global__ void column_partials_kernel(T* partial, const T* in, int64_t N, int64_t C) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t g = blockIdx.y;
  if (c >= C) return;
  const int64_t r0 = g * kRowsPerGroup, r1 = r0 + kRowsPerGroup < N ? r0 + kRowsPerGroup : N;
  T acc = 0;
  for (int64_t r = r0; r < r1; ++r) acc += in[r * C + c];
  partial[g * C + c] = acc;
}

// Pass 2: out[c] (+)= the groups' partials in group order.
template <class T>
__global__ void column_finish_kernel(T* out, const T* partial, int64_t groups, int64_t C,
                                     bool assign) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  T acc = assign ? T(0) : out[c];
  for (int64_t g = 0; g < groups; ++g) acc += partial[g * C + c];
  out[c] = acc;
}

int64_t groups_for(int64_t N) { return (N + kRowsPerGroup - 1) / kRowsPerGroup; }

}  // namespace

size_t sum_scratch_bytes() { return kPartials * sizeof(double); }

void sum(DataType dt, void* out, const void* x, int64_t n, double factor, void* scratch,
         Stream stream) {
  auto* partial = static_cast<double*>(scratch);
  const int blocks = partials_for(n);
  dispatch_float(dt, "sum", [&](auto tag) {
    using T = decltype(tag);
    partial_sums_kernel<T, false>
        <<<blocks, kThreads, 0, native(stream)>>>(partial, static_cast<const T*>(x), n);
    check_launch("sum");
    finish_sum_kernel<T>
        <<<1, kThreads, 0, native(stream)>>>(static_cast<T*>(out), partial, blocks, factor);
  });
  check_launch("sum");
}

size_t sum_squares_scratch_bytes(size_t count) {
  return (count == 0 ? 1 : count) * kPartials * sizeof(double);
}

void sum_squares(const SquaresInput* inputs, size_t count, double* result, void* scratch,
                 Stream stream) {
  auto* partial = static_cast<double*>(scratch);
  int64_t used = 0;
  for (size_t t = 0; t < count; ++t) {
    const SquaresInput& in = inputs[t];
    if (in.n == 0) continue;
    const int blocks = partials_for(in.n);
    dispatch_float(in.dtype, "sum_squares", [&](auto tag) {
      using T = decltype(tag);
      partial_sums_kernel<T, true><<<blocks, kThreads, 0, native(stream)>>>(
          partial + used, static_cast<const T*>(in.data), in.n);
    });
    check_launch("sum_squares");
    used += blocks;
  }
  finish_squares_kernel<<<1, kThreads, 0, native(stream)>>>(result, partial, used);
  check_launch("sum_squares");
}

size_t column_sums_scratch_bytes(DataType dt, int64_t N, int64_t C) {
  return static_cast<size_t>(groups_for(N) * C) * dtype_size(dt) + 1;
}

void column_sums(DataType dt, void* out, const void* in, int64_t N, int64_t C, bool assign,
                 void* scratch, Stream stream) {
  if (C == 0) return;
  const int64_t groups = groups_for(N);
  const unsigned col_blocks = static_cast<unsigned>((C + kThreads - 1) / kThreads);
  dispatch_float(dt, "column_sums", [&](auto tag) {
    using T = decltype(tag);
    auto* partial = static_cast<T*>(scratch);
    if (groups > 0) {
      column_partials_kernel<T>
          <<<dim3(col_blocks, static_cast<unsigned>(groups)), kThreads, 0, native(stream)>>>(
              partial, static_cast<const T*>(in), N, C);
      check_launch("column_sums");
    }
    column_finish_kernel<T><<<col_blocks, kThreads, 0, native(stream)>>>(
        static_cast<T*>(out), partial, groups, C, assign);
  });
  check_launch("column_sums");
}

}  // namespace chorus::tensor::cuda
