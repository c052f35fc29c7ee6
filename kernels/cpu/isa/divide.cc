// chorus — divide for one instruction set (see isa.h): the last step of kAvg.
//
// Floats divide in their own precision (16-bit floats in f32, rounded once). Integers truncate
// toward zero; hardware has no vector integer division, so the narrow integer types divide in a
// float type wide enough that the truncated quotient is exact, which the compiler vectorises:
// for |a| <= 2^k and an exactly representable divisor d, a non-integer a/d lies at least 1/|d|
// from the nearest integer, while the rounding error is at most |a/d| * 2^-p <= 2^(k-p) / |d|,
// smaller whenever k < p (f32: p = 24 covers 8-bit values; f64: p = 53 covers 32-bit ones). A
// divisor too large to be exact gives |a/d| < 1 and a quotient of 0 either way.
#include <type_traits>

#include "element_ops.h"
#include "half_convert.h"
#include "isa.h"
#include "loops.h"

namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS {
namespace {

template <class T>
void divide_typed(T* dst, const T* src, size_t count, int64_t divisor) {
  if constexpr (kStagedThroughF32<T>) {
    const float d = static_cast<float>(divisor);
    alignas(64) float x[kStage];
    for (size_t i = 0; i < count; i += kStage) {
      const size_t n = count - i < kStage ? count - i : kStage;
      widen(src + i, x, n);
      map1_in_place(x, n, [d](float v) { return v / d; });
      narrow(x, dst + i, n);
    }
  } else if constexpr (!std::is_integral_v<T>) {
    const Compute<T> d = static_cast<Compute<T>>(divisor);
    map1(dst, src, count, [d](T v) { return store_element<T>(load_element(v) / d); });
  } else if (divisor == -1) {
    // The one quotient that can overflow (min / -1); negate with wrap-around instead.
    using U = std::make_unsigned_t<T>;
    map1(dst, src, count, [](T v) { return static_cast<T>(U{0} - static_cast<U>(v)); });
  } else if constexpr (sizeof(T) == 1) {
    const float d = static_cast<float>(divisor);
    map1(dst, src, count,
         [d](T v) { return static_cast<T>(static_cast<int32_t>(static_cast<float>(v) / d)); });
  } else if constexpr (sizeof(T) == 4) {
    // Only min / -1 overflows int32, and that case is handled above.
    const double d = static_cast<double>(divisor);
    map1(dst, src, count,
         [d](T v) { return static_cast<T>(static_cast<int32_t>(static_cast<double>(v) / d)); });
  } else {
    map1(dst, src, count, [divisor](T v) { return static_cast<T>(v / divisor); });
  }
}

}  // namespace

void divide(DataType dtype, void* dst, const void* src, size_t count, int64_t divisor) {
  visit_dtype(dtype, [&]<class T>(Type<T>) {
    divide_typed(static_cast<T*>(dst), static_cast<const T*>(src), count, divisor);
  });
}

}  // namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS
