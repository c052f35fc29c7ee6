// AdamW over many parameters in one launch (kernels.h): the parameters' chunks are the blocks.
// The update is cpu/adamw.cc's, operation for operation; with no FMA contraction and IEEE
// division and square root on both sides, an f32 parameter gets the CPU's bits.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace chorus::tensor::cuda {
namespace {

constexpr int kMaxParams = 48;    // per launch: the argument block stays under 4 KiB
constexpr int64_t kChunk = 4096;  // elements per block

struct Batch {
  AdamWParam params[kMaxParams];
  int64_t first_chunk[kMaxParams + 1];  // block b works on parameter t when it is in [t, t + 1)
  int count;
};

template <class T>
__global__ void adamw_kernel(Batch batch, AdamWScalars s) {
  const int64_t b = blockIdx.x;
  int t = 0;
  while (t + 1 < batch.count && batch.first_chunk[t + 1] <= b) ++t;
  const AdamWParam& p = batch.params[t];
  const int64_t begin = (b - batch.first_chunk[t]) * kChunk;
  const int64_t end = begin + kChunk < p.n ? begin + kChunk : p.n;
  T* param = static_cast<T*>(p.param);
  const T* grad = static_cast<const T*>(p.grad);
  T* m = static_cast<T*>(p.m);
  T* v = static_cast<T*>(p.v);
  const T lr = s.lr, b1 = s.beta1, b2 = s.beta2, c1 = s.beta1_correction, c2 = s.beta2_correction,
          eps = s.eps, wd = p.weight_decay;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const T g = grad[i];
    const T mi = b1 * m[i] + (T(1) - b1) * g;
    const T vi = b2 * v[i] + (T(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const T mhat = mi / c1, vhat = vi / c2;
    param[i] -= lr * (mhat / (sqrt_of(vhat) + eps) + wd * param[i]);
  }
}

}  // namespace

void adamw(DataType dt, const AdamWParam* params, size_t count, const AdamWScalars& s,
           Stream stream) {
  size_t next = 0;
  while (next < count) {
    Batch batch{};
    int64_t chunks = 0;
    while (next < count && batch.count < kMaxParams) {
      if (params[next].n > 0) {
        batch.params[batch.count] = params[next];
        batch.first_chunk[batch.count] = chunks;
        chunks += (params[next].n + kChunk - 1) / kChunk;
        ++batch.count;
      }
      ++next;
    }
    batch.first_chunk[batch.count] = chunks;
    if (chunks == 0) continue;
    CHORUS_ARG_CHECK(chunks < (int64_t{1} << 31), "CUDA adamw: ", chunks, " chunks");
    dispatch_float(dt, "adamw", [&](auto tag) {
      using T = decltype(tag);
      adamw_kernel<T><<<static_cast<unsigned>(chunks), kThreads, 0, native(stream)>>>(batch, s);
    });
    check_launch("adamw");
  }
}

}  // namespace chorus::tensor::cuda
