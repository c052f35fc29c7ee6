// chorus — cast between any two DataTypes for one instruction set (see isa.h).
//
// Semantics (element_ops.h): to a float, round to nearest even, once (wide sources reach f16 and
// bf16 through a round-to-odd f32); float to integer, truncate toward zero and saturate, NaN -> 0;
// integer to integer, wrap like static_cast. Pairs involving a 16-bit float go through f32 blocks
// so the f16/bf16 side uses the block conversions of half_convert.h.
#include <cstring>
#include <type_traits>

#include "element_ops.h"
#include "half_convert.h"
#include "isa.h"
#include "loops.h"

namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS {
namespace {

constexpr size_t block_size(size_t done, size_t count) {
  return count - done < kStage ? count - done : kStage;
}

// dst and src do not overlap, or dst == src with sizeof(D) == sizeof(S).
template <class D, class S>
void cast_typed(D* dst, const S* src, size_t count) {
  if constexpr (std::is_same_v<D, S>) {
    if (static_cast<const void*>(dst) != src) std::memmove(dst, src, count * sizeof(D));
  } else if constexpr (kIs16BitFloat<D> && std::is_same_v<S, float>) {
    narrow(src, dst, count);
  } else if constexpr (kIs16BitFloat<S> && std::is_same_v<D, float>) {
    widen(src, dst, count);
  } else if constexpr (kIs16BitFloat<D>) {
    alignas(64) float x[kStage];
    for (size_t i = 0; i < count; i += kStage) {
      const size_t n = block_size(i, count);
      if constexpr (kIs16BitFloat<S>)
        widen(src + i, x, n);
      else
        map1_disjoint(x, src + i, n, [](S v) { return to_f32_for_16bit(v); });
      narrow(x, dst + i, n);  // the whole block was read above, so dst == src is fine
    }
  } else if constexpr (kIs16BitFloat<S>) {
    alignas(64) float x[kStage];
    for (size_t i = 0; i < count; i += kStage) {
      const size_t n = block_size(i, count);
      widen(src + i, x, n);
      map1_disjoint(dst + i, static_cast<const float*>(x), n,
                    [](float v) { return convert<D>(v); });
    }
  } else if (static_cast<const void*>(dst) == src) {
    // Same-size in-place cast (f32 <-> i32, f64 <-> i64): stage each block so that no element is
    // accessed through two types.
    alignas(64) S staged[kStage];
    for (size_t i = 0; i < count; i += kStage) {
      const size_t n = block_size(i, count);
      std::memcpy(staged, src + i, n * sizeof(S));
      map1_disjoint(dst + i, static_cast<const S*>(staged), n, [](S v) { return convert<D>(v); });
    }
  } else {
    map1_disjoint(dst, src, count, [](S v) { return convert<D>(v); });
  }
}

}  // namespace

void cast(DataType dst_type, void* dst, DataType src_type, const void* src, size_t count) {
  visit_dtype(dst_type, [&]<class D>(Type<D>) {
    visit_dtype(src_type, [&]<class S>(Type<S>) {
      cast_typed(static_cast<D*>(dst), static_cast<const S*>(src), count);
    });
  });
}

}  // namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS
