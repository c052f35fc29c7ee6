// chorus — the scalar reference for the CPU kernels, written independently of kernels/cpu: the
// element-by-element semantics every instruction set must reproduce bit for bit.
//
// Integers are computed in __int128 and wrapped; 16-bit floats are widened with chorus/half.h,
// computed in f32 and rounded once; conversions are computed exactly in long double (64-bit
// mantissa, so every source value is exact) and rounded once to the target.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "chorus/half.h"
#include "chorus/types.h"

namespace chorus::kernels::testing {

template <class T>
struct TypeTag {};

template <class F>
void visit_type(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kF32:
      return f(TypeTag<float>{});
    case DataType::kF64:
      return f(TypeTag<double>{});
    case DataType::kF16:
      return f(TypeTag<Half>{});
    case DataType::kBF16:
      return f(TypeTag<BFloat16>{});
    case DataType::kI8:
      return f(TypeTag<int8_t>{});
    case DataType::kU8:
      return f(TypeTag<uint8_t>{});
    case DataType::kI32:
      return f(TypeTag<int32_t>{});
    case DataType::kI64:
      return f(TypeTag<int64_t>{});
    default:
      break;
  }
}

template <class T>
T load(const void* base, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
void store(void* base, size_t i, T v) {
  std::memcpy(static_cast<char*>(base) + i * sizeof(T), &v, sizeof(T));
}

// ---- arithmetic type of each storage type -------------------------------------------------------

template <class T>
struct ComputeOf {
  using type = T;
};
template <>
struct ComputeOf<Half> {
  using type = float;
};
template <>
struct ComputeOf<BFloat16> {
  using type = float;
};
template <class T>
using Compute = typename ComputeOf<T>::type;

template <class T>
Compute<T> to_compute(T v) {
  if constexpr (std::is_same_v<T, Half>)
    return half_to_float(v.bits);
  else if constexpr (std::is_same_v<T, BFloat16>)
    return bf16_to_float(v.bits);
  else
    return v;
}

template <class T>
T from_compute(Compute<T> v) {
  if constexpr (std::is_same_v<T, Half>)
    return Half::from_bits(float_to_half(v));
  else if constexpr (std::is_same_v<T, BFloat16>)
    return BFloat16::from_bits(float_to_bf16(v));
  else
    return v;
}

// ---- reduction ----------------------------------------------------------------------------------

template <class T>
T wrap(__int128 v) {
  return static_cast<T>(static_cast<unsigned __int128>(v));
}

// a op b in the arithmetic type C (f32 for 16-bit floats).
template <class C>
C ref_combine(ReduceOp op, C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return wrap<C>(static_cast<__int128>(a) + b);
      case ReduceOp::kProd:
        return wrap<C>(static_cast<__int128>(a) * b);
      case ReduceOp::kMin:
        return b < a ? b : a;
      case ReduceOp::kMax:
        return b > a ? b : a;
      default:
        break;
    }
  } else {
    // NaN propagates (the first operand's when both are); for equal operands (-0 vs +0) the
    // result is the second operand.
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return a + b;
      case ReduceOp::kProd:
        return a * b;
      case ReduceOp::kMin:
        if (std::isnan(a)) return a;
        if (std::isnan(b)) return b;
        return a < b ? a : b;
      case ReduceOp::kMax:
        if (std::isnan(a)) return a;
        if (std::isnan(b)) return b;
        return a > b ? a : b;
      default:
        break;
    }
  }
  return C{};
}

template <class T>
T ref_reduce(ReduceOp op, T a, T b) {
  return from_compute<T>(ref_combine<Compute<T>>(op, to_compute(a), to_compute(b)));
}

// ---- division -----------------------------------------------------------------------------------

template <class T>
T ref_divide(T a, int64_t divisor) {
  if constexpr (std::is_integral_v<T>) {
    return wrap<T>(static_cast<__int128>(a) / divisor);  // C++ division truncates toward zero
  } else {
    using C = Compute<T>;
    return from_compute<T>(to_compute(a) / static_cast<C>(divisor));
  }
}

// ---- conversion ---------------------------------------------------------------------------------

template <class T>
long double exact_value(T v) {
  return static_cast<long double>(to_compute(v));
}

// x rounded to nearest even in a binary format with `digits` significand bits, minimum normal
// exponent `emin` and largest finite value `max_finite` (beyond which it is infinity).
inline long double round_to_format(long double x, int digits, int emin, long double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const int e = std::ilogb(x);
  const int lsb = (e > emin ? e : emin) - (digits - 1);
  const long double r = std::ldexp(std::nearbyint(std::ldexp(x, -lsb)), lsb);
  if (std::fabs(r) > max_finite)
    return std::copysign(std::numeric_limits<long double>::infinity(), x);
  return r;
}

template <class D, class S>
D ref_cast(S v) {
  if constexpr (std::is_integral_v<D> && std::is_integral_v<S>) {
    return static_cast<D>(v);  // wraps
  } else if constexpr (std::is_integral_v<D>) {
    // Truncate toward zero and saturate; NaN -> 0.
    const long double x = exact_value(v);
    if (std::isnan(x)) return 0;
    const long double t = std::trunc(x);
    if (t <= static_cast<long double>(std::numeric_limits<D>::min()))
      return std::numeric_limits<D>::min();
    if (t >= static_cast<long double>(std::numeric_limits<D>::max()))
      return std::numeric_limits<D>::max();
    return static_cast<D>(t);
  } else {
    const long double x = exact_value(v);
    if (std::isnan(x)) return from_compute<D>(std::numeric_limits<Compute<D>>::quiet_NaN());
    if constexpr (std::is_same_v<D, double>) return static_cast<double>(x);  // exact or RNE
    if constexpr (std::is_same_v<D, float>)
      return static_cast<float>(round_to_format(x, 24, -126, FLT_MAX));
    if constexpr (std::is_same_v<D, Half>)
      return from_compute<D>(static_cast<float>(round_to_format(x, 11, -14, 65504.0L)));
    if constexpr (std::is_same_v<D, BFloat16>) {
      const long double max_bf16 = std::ldexp(255.0L, 120);  // 0x7f7f
      return from_compute<D>(static_cast<float>(round_to_format(x, 8, -126, max_bf16)));
    }
  }
}

}  // namespace chorus::kernels::testing
