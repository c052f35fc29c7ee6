// chorus — the scalar semantics of every GPU kernel, on the device: how two elements combine and
// how one element converts to another type. A line-for-line restatement of the CPU contract in
// kernels/cpu/isa/element_ops.h (which the tests hold these kernels to, bit for bit); where the two
// differ in form the comment says why the bits agree. Device code uses no std:: functions (they are
// host-only without --expt-relaxed-constexpr), only the type traits.
#pragma once

#include <cstdint>
#include <type_traits>

#include "chorus/types.h"
#include "portability.h"

namespace chorus::kernels::gpu::detail {

#define CHORUS_DEVICE __device__ __forceinline__

// 16-bit float storage on the device (chorus::Half / BFloat16 have host-only conversions).
struct F16 {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};

template <class T>
inline constexpr bool kIs16BitFloat = std::is_same_v<T, F16> || std::is_same_v<T, BF16>;

// The arithmetic type of each storage type: f32 for the 16-bit floats.
template <class T>
using Compute = std::conditional_t<kIs16BitFloat<T>, float, T>;

// ---- 16-bit float conversions -------------------------------------------------------------------

CHORUS_DEVICE float f16_to_f32(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }

// Round to nearest even, overflow to infinity, subnormals kept: the hardware conversion, which is
// what chorus::float_to_half computes in software.
CHORUS_DEVICE uint16_t f32_to_f16(float f) { return __half_as_ushort(__float2half_rn(f)); }

CHORUS_DEVICE float bf16_to_f32(uint16_t bits) { return __uint_as_float(uint32_t{bits} << 16); }

// chorus::float_to_bf16 restated: round to nearest even on the 16 dropped bits; NaN stays NaN.
CHORUS_DEVICE uint16_t f32_to_bf16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

template <class T>
CHORUS_DEVICE Compute<T> load_element(T v) {
  if constexpr (std::is_same_v<T, F16>)
    return f16_to_f32(v.bits);
  else if constexpr (std::is_same_v<T, BF16>)
    return bf16_to_f32(v.bits);
  else
    return v;
}

template <class T>
CHORUS_DEVICE T store_element(Compute<T> v) {
  if constexpr (std::is_same_v<T, F16>)
    return F16{f32_to_f16(v)};
  else if constexpr (std::is_same_v<T, BF16>)
    return BF16{f32_to_bf16(v)};
  else
    return v;
}

// ---- reduction operators ------------------------------------------------------------------------
//
// Integers: sum and product wrap (computed unsigned: no signed-overflow UB). Floats: IEEE in the
// arithmetic type; min and max propagate NaN (a if a is NaN, else b if b is NaN) and return b for
// equal operands. kAvg never reaches here (it reduces as kSum).
template <ReduceOp kOp, class C>
CHORUS_DEVICE C combine(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    if constexpr (kOp == ReduceOp::kSum)
      return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
    else if constexpr (kOp == ReduceOp::kProd)
      return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
    else if constexpr (kOp == ReduceOp::kMin)
      return a < b ? a : b;
    else
      return a > b ? a : b;
  } else {
    if constexpr (kOp == ReduceOp::kSum)
      return a + b;
    else if constexpr (kOp == ReduceOp::kProd)
      return a * b;
    else if constexpr (kOp == ReduceOp::kMin)
      return ((a < b) | (a != a)) ? a : b;
    else
      return ((a > b) | (a != a)) ? a : b;
  }
}

// ---- conversions --------------------------------------------------------------------------------
//
// Wide values (f64, i32, i64) reach f16/bf16 through an f32 rounded to odd, so the second rounding
// to nearest even gives the correctly rounded result (see the CPU header for the argument).

CHORUS_DEVICE float to_f32_round_odd(double d) {
  const float t = static_cast<float>(d);  // nearest; overflows to infinity
  const double back = static_cast<double>(t);
  uint32_t u = __float_as_uint(t);
  const bool inexact = (back != d) & (d == d);
  const bool rounded_away = inexact & (d > 0 ? back > d : back < d);
  u -= static_cast<uint32_t>(rounded_away);
  u |= static_cast<uint32_t>(inexact);
  return __uint_as_float(u);
}

CHORUS_DEVICE float to_f32_round_odd(int64_t x) {
  const uint64_t mag = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  // Keep the 24 most significant bits and fold the dropped ones into a sticky last bit.
  const int shift = (mag >> 24) != 0 ? 40 - __clzll(static_cast<long long>(mag)) : 0;
  uint64_t kept = mag >> shift;
  kept |= static_cast<uint64_t>((mag & ((uint64_t{1} << shift) - 1)) != 0);
  const float scale = __uint_as_float(static_cast<uint32_t>(127 + shift) << 23);  // 2^shift
  const float f = static_cast<float>(kept) * scale;  // exact: kept < 2^24
  return x < 0 ? -f : f;
}

// The limits of the integer types, as device constants.
template <class I>
struct IntLimits {
  static constexpr int kDigits = std::is_signed_v<I> ? 8 * sizeof(I) - 1 : 8 * sizeof(I);
  static constexpr I kMin = std::is_signed_v<I> ? static_cast<I>(uint64_t{1} << kDigits) : I(0);
  static constexpr I kMax = static_cast<I>(~kMin);
};

// Float to integer: truncate toward zero, saturating; NaN -> 0.
template <class I, class F>
CHORUS_DEVICE I float_to_int(F x) {
  constexpr F kHi = static_cast<F>(uint64_t{1} << IntLimits<I>::kDigits);  // first value past max
  constexpr F kLo = std::is_signed_v<I> ? -kHi : F(0);
  if (x != x) return 0;
  if (x <= kLo) return IntLimits<I>::kMin;
  if (x >= kHi) return IntLimits<I>::kMax;
  return static_cast<I>(x);
}

// Between two non-16-bit types: integers wrap, floats round to nearest even.
template <class D, class S>
CHORUS_DEVICE D convert(S x) {
  if constexpr (std::is_integral_v<D> && std::is_floating_point_v<S>)
    return float_to_int<D>(x);
  else
    return static_cast<D>(x);
}

// A non-16-bit source as an f32 from which one round to f16/bf16 is exact.
template <class S>
CHORUS_DEVICE float to_f32_for_16bit(S x) {
  if constexpr (std::is_same_v<S, double>)
    return to_f32_round_odd(x);
  else if constexpr (std::is_same_v<S, int32_t> || std::is_same_v<S, int64_t>)
    return to_f32_round_odd(static_cast<int64_t>(x));
  else
    return static_cast<float>(x);
}

// Any type to any other, as the CPU cast does it.
template <class D, class S>
CHORUS_DEVICE D cast_element(S x) {
  if constexpr (kIs16BitFloat<D>) {
    float f;
    if constexpr (kIs16BitFloat<S>)
      f = load_element(x);
    else
      f = to_f32_for_16bit(x);
    return store_element<D>(f);
  } else if constexpr (kIs16BitFloat<S>) {
    return convert<D>(load_element(x));
  } else {
    return convert<D>(x);
  }
}

// ---- type dispatch ------------------------------------------------------------------------------

template <class T>
struct Type {};

// Calls f(Type<T>{}) with the device storage type of `dtype` (validated by the caller).
template <class F>
void visit_dtype(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kF32:
      return f(Type<float>{});
    case DataType::kF64:
      return f(Type<double>{});
    case DataType::kF16:
      return f(Type<F16>{});
    case DataType::kBF16:
      return f(Type<BF16>{});
    case DataType::kI8:
      return f(Type<int8_t>{});
    case DataType::kU8:
      return f(Type<uint8_t>{});
    case DataType::kI32:
      return f(Type<int32_t>{});
    case DataType::kI64:
      return f(Type<int64_t>{});
    default:
      break;
  }
}

}  // namespace chorus::kernels::gpu::detail
