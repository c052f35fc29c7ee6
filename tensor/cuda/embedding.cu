// Embedding of the CUDA backend (kernels.h): rows gathered word by word, the index range for the
// backend's bounds check, and the weight gradient from rows grouped on the host, each group's
// rows added in index order (the CPU's order: the same bits, without atomics).
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace chorus::tensor::cuda {
namespace {

template <class I>
__global__ void range_kernel(int64_t* range, const I* idx, int64_t n) {
  __shared__ int64_t scratch[kWarp];
  int64_t lo = static_cast<int64_t>(idx[0]), hi = lo;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t v = static_cast<int64_t>(idx[i]);
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  hi = block_reduce<int64_t, true>(hi, scratch);
  lo = -block_reduce<int64_t, true>(-lo, scratch);
  if (threadIdx.x == 0) {
    range[0] = lo;
    range[1] = hi;
  }
}

// out row n = weight row idx[n]; W words per row.
template <class Word, class I>
__global__ void gather_kernel(Word* out, const I* idx, const Word* weight, int64_t N, int64_t W) {
  const int64_t total = N * W;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i / W, w = i % W;
    out[i] = weight[static_cast<int64_t>(idx[n]) * W + w];
  }
}

// Block g: weight row rows[g] += dy rows order[starts[g] .. starts[g+1]), in that order.
template <class T>
__global__ void scatter_kernel(T* dweight, const T* dy, int64_t C, const int64_t* rows,
                               const int64_t* starts, const int64_t* order) {
  const int64_t g = blockIdx.x;
  T* row = dweight + rows[g] * C;
  const int64_t k0 = starts[g], k1 = starts[g + 1];
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    T acc = row[c];
    for (int64_t k = k0; k < k1; ++k) acc += dy[order[k] * C + c];
    row[c] = acc;
  }
}

template <class I>
void gather(void* out, const I* idx, const void* weight, int64_t N, size_t row_bytes,
            Stream stream) {
  // The widest word that divides the row and both addresses.
  const auto aligned = [&](size_t w) {
    return row_bytes % w == 0 && reinterpret_cast<uintptr_t>(out) % w == 0 &&
           reinterpret_cast<uintptr_t>(weight) % w == 0;
  };
  auto launch = [&](auto word) {
    using Word = decltype(word);
    const int64_t W = static_cast<int64_t>(row_bytes / sizeof(Word));
    gather_kernel<Word, I><<<grid_for(N * W), kThreads, 0, native(stream)>>>(
        static_cast<Word*>(out), idx, static_cast<const Word*>(weight), N, W);
  };
  if (aligned(16))
    launch(uint4{});
  else if (aligned(8))
    launch(uint2{});
  else if (aligned(4))
    launch(uint32_t{});
  else if (aligned(2))
    launch(uint16_t{});
  else
    launch(uint8_t{});
}

}  // namespace

void index_range(DataType idt, const void* idx, int64_t n, int64_t* range, Stream stream) {
  dispatch_index(idt, "index_range", [&](auto itag) {
    using I = decltype(itag);
    range_kernel<I><<<1, kThreads, 0, native(stream)>>>(range, static_cast<const I*>(idx), n);
  });
  check_launch("index_range");
}

void embedding_forward(DataType idt, void* out, const void* idx, const void* weight, int64_t N,
                       size_t row_bytes, Stream stream) {
  if (N == 0 || row_bytes == 0) return;
  dispatch_index(idt, "embedding_forward", [&](auto itag) {
    using I = decltype(itag);
    gather(out, static_cast<const I*>(idx), weight, N, row_bytes, stream);
  });
  check_launch("embedding_forward");
}

void embedding_backward(DataType dt, void* dweight, const void* dy, int64_t C, const int64_t* rows,
                        const int64_t* starts, const int64_t* order, int64_t groups,
                        Stream stream) {
  if (groups == 0 || C == 0) return;
  CHORUS_ARG_CHECK(groups < (int64_t{1} << 31), "CUDA embedding_backward: ", groups, " rows");
  dispatch_float(dt, "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    scatter_kernel<T><<<static_cast<unsigned>(groups), kThreads, 0, native(stream)>>>(
        static_cast<T*>(dweight), static_cast<const T*>(dy), C, rows, starts, order);
  });
  check_launch("embedding_backward");
}

}  // namespace chorus::tensor::cuda
