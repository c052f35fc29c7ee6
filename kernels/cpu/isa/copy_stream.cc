// chorus — copy_stream(): a copy whose stores bypass the caches (non-temporal), for destinations
// nobody reads soon. The widest streaming store of the build: 64 bytes (AVX-512), 32 (AVX2) or 16
// (SSE2, the x86-64 baseline); a head up to the first aligned destination byte and the tail are
// copied with ordinary stores. Ends with a store fence, so the bytes are visible to other cores
// before any later store (a flag that announces them) is.
#include <immintrin.h>

#include <cstring>

#include "isa.h"

namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS {

void copy_stream(void* dst, const void* src, size_t bytes) {
#if defined(__AVX512F__)
  using Vec = __m512i;
#elif defined(__AVX2__)
  using Vec = __m256i;
#else
  using Vec = __m128i;
#endif
  constexpr size_t kVec = sizeof(Vec);
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  const size_t head = (kVec - reinterpret_cast<uintptr_t>(d) % kVec) % kVec;
  if (bytes < head + 4 * kVec) {
    std::memcpy(d, s, bytes);
    return;
  }
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  size_t i = 0;
  for (; i + 4 * kVec <= bytes; i += 4 * kVec) {
#if defined(__AVX512F__)
    const Vec a = _mm512_loadu_si512(s + i), b = _mm512_loadu_si512(s + i + kVec),
              c = _mm512_loadu_si512(s + i + 2 * kVec), e = _mm512_loadu_si512(s + i + 3 * kVec);
    _mm512_stream_si512(reinterpret_cast<Vec*>(d + i), a);
    _mm512_stream_si512(reinterpret_cast<Vec*>(d + i + kVec), b);
    _mm512_stream_si512(reinterpret_cast<Vec*>(d + i + 2 * kVec), c);
    _mm512_stream_si512(reinterpret_cast<Vec*>(d + i + 3 * kVec), e);
#elif defined(__AVX2__)
    const Vec* p = reinterpret_cast<const Vec*>(s + i);
    const Vec a = _mm256_loadu_si256(p), b = _mm256_loadu_si256(p + 1),
              c = _mm256_loadu_si256(p + 2), e = _mm256_loadu_si256(p + 3);
    Vec* q = reinterpret_cast<Vec*>(d + i);
    _mm256_stream_si256(q, a);
    _mm256_stream_si256(q + 1, b);
    _mm256_stream_si256(q + 2, c);
    _mm256_stream_si256(q + 3, e);
#else
    const Vec* p = reinterpret_cast<const Vec*>(s + i);
    const Vec a = _mm_loadu_si128(p), b = _mm_loadu_si128(p + 1), c = _mm_loadu_si128(p + 2),
              e = _mm_loadu_si128(p + 3);
    Vec* q = reinterpret_cast<Vec*>(d + i);
    _mm_stream_si128(q, a);
    _mm_stream_si128(q + 1, b);
    _mm_stream_si128(q + 2, c);
    _mm_stream_si128(q + 3, e);
#endif
  }
  _mm_sfence();
  std::memcpy(d + i, s + i, bytes - i);
}

}  // namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS
