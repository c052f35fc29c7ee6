// chorus — internal: how a GPU element-wise call is split into work, and the launch entry points
// behind the validated public API (kernels/gpu/api.cc). Plain C++: included by the .cu sources, by
// the no-GPU stubs and by the tests.
//
// Vocabulary: a "pack" is the run of elements one thread moves with 16-byte accesses (16 bytes of
// the narrowest type involved, so a cast from i8 to f64 reads one 16-byte word and writes eight).
// The "head" is the elements before the first position where every pointer is 16-byte aligned;
// head, packs and tail are processed by the same kernel, the head and tail element by element.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "chorus/gpu/runtime.h"
#include "chorus/kernels/gpu.h"
#include "chorus/types.h"

namespace chorus::kernels::gpu::detail {

inline constexpr size_t kAccessBytes = 16;

struct Plan {
  size_t head = 0;   // elements [0, head) one at a time
  size_t packs = 0;  // then `packs` packs of pack_elems elements
  size_t count = 0;  // then the tail [head + packs * pack_elems, count) one at a time
};

// One pointer taking part in an element-wise call, with its element size.
struct Access {
  const void* ptr;
  size_t elem_bytes;
};

// The split of `count` elements into head, packs and tail such that every access at the start of
// a pack is 16-byte aligned. When the pointers' offsets modulo 16 cannot all be aligned at one
// element index, everything is head (element by element). Pure; tested on its own.
inline Plan make_plan(const Access* accesses, size_t n_accesses, size_t count, size_t pack_elems) {
  Plan plan;
  plan.count = count;
  plan.head = count;
  // The alignment pattern repeats every 16 elements, so 16 candidates decide it.
  for (size_t h = 0; h < kAccessBytes && h < count; ++h) {
    bool aligned = true;
    for (size_t k = 0; k < n_accesses; ++k) {
      const auto addr = reinterpret_cast<uintptr_t>(accesses[k].ptr) + h * accesses[k].elem_bytes;
      aligned = aligned && addr % kAccessBytes == 0;
    }
    if (aligned) {
      plan.head = h;
      plan.packs = (count - h) / pack_elems;
      return plan;
    }
  }
  return plan;
}

inline Plan make_plan(std::initializer_list<Access> accesses, size_t count, size_t pack_elems) {
  return make_plan(accesses.begin(), accesses.size(), count, pack_elems);
}

// Elements per pack for a call reading `src_bytes`-sized and writing `dst_bytes`-sized elements.
constexpr size_t pack_elems(size_t dst_bytes, size_t src_bytes) {
  return kAccessBytes / (dst_bytes < src_bytes ? dst_bytes : src_bytes);
}

// Blocks for `units` independent work items at `threads` per block: enough to fill any current
// GPU several times over, capped so that each thread of a huge call loops over several packs.
inline unsigned grid_blocks(size_t units, unsigned threads) {
  constexpr size_t kMaxBlocks = 4096;
  const size_t blocks = (units + threads - 1) / threads;
  return static_cast<unsigned>(blocks == 0 ? 1 : (blocks < kMaxBlocks ? blocks : kMaxBlocks));
}

// The launches behind the public API, called with validated arguments and count > 0 (reduce_n
// with 2 <= n). Defined by the .cu sources, or by launch_none.cc when built without GPU support.
void launch_reduce(DataType dtype, ReduceOp op, void* dst, const void* const* srcs, int n,
                   size_t count, chorus::gpu::Stream stream);
void launch_divide(DataType dtype, void* dst, const void* src, size_t count, int64_t divisor,
                   chorus::gpu::Stream stream);
void launch_copy(void* dst, const void* src, size_t bytes, chorus::gpu::Stream stream);
void launch_cast(DataType dst_type, void* dst, DataType src_type, const void* src, size_t count,
                 chorus::gpu::Stream stream);

}  // namespace chorus::kernels::gpu::detail
