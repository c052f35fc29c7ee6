// chorus — f16 and bf16 blocks to f32 and back, with the widest conversions the instruction set
// has. Every kernel on 16-bit floats widens its inputs block by block, computes in f32 and
// narrows once per output element, so these four functions are the only ISA-specific code.
//
// Narrowing rounds to nearest even and keeps NaN a NaN, bit-identical to chorus::float_to_half
// and chorus::float_to_bf16 (F16C's vcvtps2ph with an explicit rounding immediate ignores MXCSR
// and does exactly that; bf16 rounding is integer arithmetic on every ISA, see element_ops.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "element_ops.h"
#include "isa.h"

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS {

// ---- bf16: shifts and integer rounding, vectorised by the compiler ------------------------------

inline void widen(const BFloat16* __restrict src, float* __restrict dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_float(src[i].bits);
}

inline void narrow(const float* __restrict src, BFloat16* __restrict dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i].bits = round_to_bf16(src[i]);
}

// ---- f16 ----------------------------------------------------------------------------------------
#if defined(__AVX512F__)
static_assert(sizeof(Half) == 2);
inline constexpr int kHalfRounding = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// The zero-masking forms with a full mask compile to the plain instructions; the plain intrinsics
// trip a false -Wmaybe-uninitialized in GCC 12's headers (GCC bug 105593).
inline __m512 cvt_f16x16_to_f32(__m256i h) { return _mm512_maskz_cvtph_ps(0xffff, h); }
inline __m256i cvt_f32x16_to_f16(__m512 f) {
  return _mm512_maskz_cvtps_ph(0xffff, f, kHalfRounding);
}

inline void widen(const Half* __restrict src, float* __restrict dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(
        dst + i, cvt_f16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  if (i < n) {  // tail: masked loads and stores never touch memory past the end
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(dst + i, m, cvt_f16x16_to_f32(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

inline void narrow(const float* __restrict src, Half* __restrict dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        cvt_f32x16_to_f16(_mm512_loadu_ps(src + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(dst + i, m, cvt_f32x16_to_f16(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

#elif defined(__F16C__)
static_assert(sizeof(Half) == 2);
inline constexpr int kHalfRounding = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

inline void widen(const Half* __restrict src, float* __restrict dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  if (i < n) {  // tail through a zero-padded vector
    uint16_t in[8] = {};
    float out[8];
    std::memcpy(in, src + i, (n - i) * sizeof(Half));
    _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in))));
    std::memcpy(dst + i, out, (n - i) * sizeof(float));
  }
}

inline void narrow(const float* __restrict src, Half* __restrict dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kHalfRounding));
  if (i < n) {
    float in[8] = {};
    uint16_t out[8];
    std::memcpy(in, src + i, (n - i) * sizeof(float));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in), kHalfRounding));
    std::memcpy(dst + i, out, (n - i) * sizeof(Half));
  }
}

#else
// Baseline x86-64 has no f16 conversion instructions; the scalar code of chorus/half.h is safe to
// call from here because this build is baseline itself (see isa.h).
#if defined(__AVX__)
#error "a build with AVX must convert f16 with F16C or AVX-512 instructions (see isa.h)"
#endif

inline void widen(const Half* __restrict src, float* __restrict dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i].bits);
}

inline void narrow(const float* __restrict src, Half* __restrict dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i].bits = float_to_half(src[i]);
}
#endif

}  // namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS
