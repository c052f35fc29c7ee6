// chorus — the scalar semantics of every kernel: how two elements combine and how one element
// converts to another type. The loops in this folder apply these functions element by element
// and leave the vectorising to the compiler, so what is written here is the contract on every
// instruction set.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "isa.h"

namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS {

// ---- reduction operators ------------------------------------------------------------------------
//
// Integers: sum and product wrap (computed in the unsigned type, so there is no signed-overflow
// UB). Floats: IEEE arithmetic in the element's own type (f32 for 16-bit floats); min and max
// propagate NaN: if a is NaN the result is a, else if b is NaN it is b. For equal operands the
// result is b, so min(-0, +0) = +0 and min(+0, -0) = -0, exactly what x86 minps/maxps return;
// the form below lets the compiler use them plus one NaN blend.
template <ReduceOp kOp, class T>
inline T combine(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    if constexpr (kOp == ReduceOp::kSum) {
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else if constexpr (kOp == ReduceOp::kProd) {
      // u8 * u8 promotes to int, where 255 * 255 cannot overflow; wider types stay unsigned.
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    } else if constexpr (kOp == ReduceOp::kMin) {
      return a < b ? a : b;
    } else {
      static_assert(kOp == ReduceOp::kMax);
      return a > b ? a : b;
    }
  } else {
    if constexpr (kOp == ReduceOp::kSum) {
      return a + b;
    } else if constexpr (kOp == ReduceOp::kProd) {
      return a * b;
    } else if constexpr (kOp == ReduceOp::kMin) {
      return ((a < b) | (a != a)) ? a : b;
    } else {
      static_assert(kOp == ReduceOp::kMax);
      return ((a > b) | (a != a)) ? a : b;
    }
  }
}

// ---- bfloat16 rounding --------------------------------------------------------------------------

// chorus::float_to_bf16, restated (see isa.h): round to nearest even on the 16 dropped bits; a
// NaN stays a NaN (quiet bit set). Branch-free so that it vectorises on every instruction set.
// AVX512-BF16's vcvtneps2bf16 is not used: it flushes denormals to zero.
inline uint16_t round_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

inline float bf16_bits_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t{b} << 16); }

// ---- storage and arithmetic types ---------------------------------------------------------------
//
// Each element is loaded into its arithmetic type (f32 for the 16-bit floats), combined there and
// stored back, rounding once. For every type but f16 the per-element conversions below are plain
// integer and float operations that the compiler vectorises inside the kernel loops. f16 needs
// conversion instructions the vectoriser does not emit, so its kernels convert whole blocks
// through half_convert.h instead (kStagedThroughF32).

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
inline constexpr bool kStagedThroughF32 = std::is_same_v<T, Half>;

template <class T>
inline Compute<T> load_element(T v) {
  static_assert(!kStagedThroughF32<T>);
  if constexpr (std::is_same_v<T, BFloat16>)
    return bf16_bits_to_float(v.bits);
  else
    return v;
}

template <class T>
inline T store_element(Compute<T> v) {
  static_assert(!kStagedThroughF32<T>);
  if constexpr (std::is_same_v<T, BFloat16>) {
    BFloat16 out;
    out.bits = round_to_bf16(v);
    return out;
  } else {
    return v;
  }
}

// ---- conversions --------------------------------------------------------------------------------
//
// Casting a wide value (f64, i32, i64) to f16 or bf16 goes through f32, and rounding twice
// (wide -> f32 -> 16 bits) can differ from rounding once. Rounding to odd in the first step
// avoids that: truncate, and set the last bit if anything was dropped. Because f32 keeps at least
// two more bits than f16 (11) or bf16 (8) at every magnitude either one can represent, the
// second, round-to-nearest-even step then gives the correctly rounded result (Boldo & Melquiond,
// "When double rounding is odd", 2005).

inline float to_f32_round_odd(double d) {
  const float t = static_cast<float>(d);  // nearest; overflows to infinity
  const double back = static_cast<double>(t);
  uint32_t u = std::bit_cast<uint32_t>(t);
  const bool inexact = (back != d) & (d == d);
  const bool rounded_away = inexact & (d > 0 ? back > d : back < d);
  u -= static_cast<uint32_t>(rounded_away);  // one step toward zero in magnitude
  u |= static_cast<uint32_t>(inexact);
  return std::bit_cast<float>(u);
}

inline float to_f32_round_odd(int64_t x) {
  const uint64_t mag = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  // Keep the 24 most significant bits and fold the dropped ones into a sticky last bit.
  const int shift = (mag >> 24) != 0 ? 40 - __builtin_clzll(mag) : 0;
  uint64_t kept = mag >> shift;
  kept |= static_cast<uint64_t>((mag & ((uint64_t{1} << shift) - 1)) != 0);
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(127 + shift) << 23);  // 2^shift
  const float f = static_cast<float>(kept) * scale;  // exact: kept < 2^24
  return x < 0 ? -f : f;
}

// Float to integer: truncate toward zero, saturating. NaN becomes 0 and values beyond the
// integer's range become its nearest limit (so no input is UB, and every ISA agrees).
template <class I, class F>
inline I float_to_int(F x) {
  constexpr int kDigits = std::numeric_limits<I>::digits;    // 7, 8, 31 or 63
  constexpr F kHi = static_cast<F>(uint64_t{1} << kDigits);  // first value past max(), exact
  constexpr F kLo = std::is_signed_v<I> ? -kHi : F(0);       // min() (or 0), exact
  if (x != x) return 0;
  if (x <= kLo) return std::numeric_limits<I>::min();
  if (x >= kHi) return std::numeric_limits<I>::max();
  return static_cast<I>(x);
}

// Conversion between two non-16-bit types (a 16-bit float source arrives widened to f32).
// Integers to integers wrap like static_cast; anything to a float rounds to nearest even.
template <class D, class S>
inline D convert(S x) {
  if constexpr (std::is_integral_v<D> && std::is_floating_point_v<S>)
    return float_to_int<D>(x);
  else
    return static_cast<D>(x);
}

// Any non-16-bit source as an f32 from which one more round-to-nearest-even step to f16 or bf16
// is exact (see above): small integers and f32 are exact already.
template <class S>
inline float to_f32_for_16bit(S x) {
  if constexpr (std::is_same_v<S, double>)
    return to_f32_round_odd(x);
  else if constexpr (std::is_same_v<S, int32_t> || std::is_same_v<S, int64_t>)
    return to_f32_round_odd(static_cast<int64_t>(x));
  else
    return static_cast<float>(x);
}

}  // namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS
