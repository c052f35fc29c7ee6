// chorus — the one kernel shape behind reduce, divide and cast: dst[i] = f(srcs[0][i], ...,
// srcs[n-1][i]) with n chosen at run time, so each (type, operation) pair costs one instantiation
// and no per-n copies.
//
// An operation is a small struct (see reduce.cu, divide.cu, cast.cu):
//   using Acc = ...;                       the type elements are folded in
//   Acc first(S x) const;                  srcs[0][i] into the accumulator
//   Acc next(Acc acc, S x) const;          each further source, left to right
//   D last(Acc acc) const;                 the accumulator into dst[i], rounding once
// The element order of the fold is the CPU kernels' order, which is what makes the bits agree.
//
// Work (launch.h's Plan): every thread strides over the head elements, then over the packs (each
// source's pack read with 16-byte loads, the result written with 16-byte stores), then over the
// tail. dst may be one of the sources: a thread reads all of its element's inputs before writing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "element_ops.cuh"
#include "launch.h"
#include "portability.h"

namespace chorus::kernels::gpu::detail {

inline constexpr unsigned kThreads = 256;

// launch.h's pack_elems() as a constant that device code may read.
template <class D, class S>
inline constexpr int kPackElems = static_cast<int>(pack_elems(sizeof(D), sizeof(S)));

// The source pointers by value in the kernel's parameters (no device-side array to manage).
struct Sources {
  const void* ptr[kMaxReduceInputs];
};

// kElems elements of T, moved as whole 16-byte words.
template <class T, int kElems>
union Pack {
  static_assert(kElems * sizeof(T) % kAccessBytes == 0);
  uint4 words[kElems * sizeof(T) / kAccessBytes];
  T elems[kElems];
};

template <class T, int kElems>
CHORUS_DEVICE void load_pack(Pack<T, kElems>& pack, const T* src) {
  const uint4* words = reinterpret_cast<const uint4*>(src);
#pragma unroll
  for (int w = 0; w < int(sizeof(pack.words) / sizeof(uint4)); ++w) pack.words[w] = words[w];
}

template <class T, int kElems>
CHORUS_DEVICE void store_pack(T* dst, const Pack<T, kElems>& pack) {
  uint4* words = reinterpret_cast<uint4*>(dst);
#pragma unroll
  for (int w = 0; w < int(sizeof(pack.words) / sizeof(uint4)); ++w) words[w] = pack.words[w];
}

template <class D, class S, class Op>
CHORUS_DEVICE void map_element(D* dst, const Sources& srcs, int n, const Op& op, size_t i) {
  typename Op::Acc acc = op.first(static_cast<const S*>(srcs.ptr[0])[i]);
  for (int k = 1; k < n; ++k) acc = op.next(acc, static_cast<const S*>(srcs.ptr[k])[i]);
  dst[i] = op.last(acc);
}

template <class D, class S, class Op>
__global__ void __launch_bounds__(kThreads)
    map_kernel(D* dst, Sources srcs, int n, Op op, Plan plan) {
  constexpr int kElems = kPackElems<D, S>;
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  const size_t tid = size_t{blockIdx.x} * blockDim.x + threadIdx.x;

  for (size_t i = tid; i < plan.head; i += stride) map_element<D, S>(dst, srcs, n, op, i);

  for (size_t p = tid; p < plan.packs; p += stride) {
    const size_t base = plan.head + p * kElems;
    typename Op::Acc acc[kElems];
    Pack<S, kElems> in;
    load_pack(in, static_cast<const S*>(srcs.ptr[0]) + base);
#pragma unroll
    for (int j = 0; j < kElems; ++j) acc[j] = op.first(in.elems[j]);
    for (int k = 1; k < n; ++k) {
      load_pack(in, static_cast<const S*>(srcs.ptr[k]) + base);
#pragma unroll
      for (int j = 0; j < kElems; ++j) acc[j] = op.next(acc[j], in.elems[j]);
    }
    Pack<D, kElems> out;
#pragma unroll
    for (int j = 0; j < kElems; ++j) out.elems[j] = op.last(acc[j]);
    store_pack(dst + base, out);
  }

  for (size_t i = plan.head + plan.packs * kElems + tid; i < plan.count; i += stride)
    map_element<D, S>(dst, srcs, n, op, i);
}

// Throws GpuError for a failed launch (bad configuration, no device, no kernel image for this
// device). Defined in runtime.cu.
void check_launch(const char* what);

// Queues map_kernel for `count` elements of dst = op(srcs[0..n)).
template <class D, class S, class Op>
void launch_map(D* dst, const void* const* srcs, int n, size_t count, const Op& op,
                chorus::gpu::Stream stream, const char* what) {
  Sources sources{};
  for (int k = 0; k < n; ++k) sources.ptr[k] = srcs[k];
  constexpr size_t kElems = kPackElems<D, S>;
  Access accesses[kMaxReduceInputs + 1];
  accesses[0] = {dst, sizeof(D)};
  for (int k = 0; k < n; ++k) accesses[k + 1] = {srcs[k], sizeof(S)};
  const Plan plan = make_plan(accesses, static_cast<size_t>(n) + 1, count, kElems);
  const size_t units = plan.packs > plan.head ? plan.packs : plan.head;
  const size_t tail = count - plan.head - plan.packs * kElems;
  const unsigned blocks = grid_blocks(units > tail ? units : tail, kThreads);
  map_kernel<D, S, Op><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream.native)>>>(
      dst, sources, n, op, plan);
  check_launch(what);
}

}  // namespace chorus::kernels::gpu::detail
