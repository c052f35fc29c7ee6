// The native bf16 GEMM of autocast: C (f32) = round_bf16(op(A) op(B)) [+ C], A and B bf16,
// f32 accumulation, on CPUs with AVX512-BF16 (vdpbf16ps).
//
// Scheme: gemm_blocked.cc's, with k taken in pairs. vdpbf16ps multiplies 16 lanes of bf16
// pairs and adds each pair's two products into one f32 lane, so
//   B panel (32 columns): for pair q, column j holds (op(B)[2q][j], op(B)[2q+1][j]) as 32 bits;
//                         two zmm per pair (columns 0-15, 16-31); zero past N and past K.
//   A slice (12 rows):    row i's pair (op(A)[i][2q], op(A)[i][2q+1]) is broadcast to all
//                         lanes: read in place from a row-major A (the pair is contiguous),
//                         packed (24 values per pair) when A is transposed, K is odd or the
//                         slice is a partial last one.
// Per pair: 2 loads of B, 12 broadcasts, 24 vdpbf16ps = 768 multiply-adds (twice fp32's per
// instruction).
// No K blocking: K is taken whole (B panel K x 32 bf16 = 64 KiB at K = 1024, read from L2), so
// the rounding of the result to bf16 (what a bf16 GEMM's output holds) applies to the full sum.
#include <algorithm>
#include <cstring>

#include "cpu/simd.h"
#include "gemm/backend.h"
#include "gemm/scratch.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#include <immintrin.h>
#define CHORUS_HAVE_BF16_GEMM 1
#define CHORUS_AVX512BF16 \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16,fma")))
#endif

namespace chorus::tensor::gemm_impl {

#if defined(CHORUS_HAVE_BF16_GEMM)
namespace {

constexpr int64_t kMR = 12, kNR = 32, kMC = 120;

// f32 -> nearest bf16 value, as f32 (round to nearest even).
CHORUS_AVX512BF16 inline __m512 round_bf16(__m512 v) {
  // The maskz forms: GCC 12's unmasked ones trip -Wuninitialized inside its own headers.
  const __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
  const __mmask16 all = 0xFFFF;
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, h), 16));
}

CHORUS_AVX512BF16 inline void store_row(float* cr, __m512 r0, __m512 r1, __m512 va, bool accumulate,
                                        __mmask16 m0, __mmask16 m1) {
  r0 = round_bf16(_mm512_mul_ps(r0, va));
  r1 = round_bf16(_mm512_mul_ps(r1, va));
  if (accumulate) {
    r0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cr), r0);
    r1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cr + 16), r1);
  }
  _mm512_mask_storeu_ps(cr, m0, r0);
  _mm512_mask_storeu_ps(cr + 16, m1, r1);
}

// Row i's pair q of the A slice: packed (24 per pair) or in place (row stride lda).
template <bool kPacked>
CHORUS_AVX512BF16 void kernel_bf16_12x32(int64_t pairs, const uint16_t* __restrict ap, int64_t lda,
                                         const uint16_t* __restrict bp, float* c, int64_t ldc,
                                         int64_t mr, int64_t nr, float alpha, bool accumulate) {
  const int64_t ps = kPacked ? 2 * kMR : 2;  // elements between pairs q and q+1
  const int64_t is = kPacked ? 2 : lda;      // elements between rows i and i+1
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
         c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00,
         c70 = c00, c71 = c00, c80 = c00, c81 = c00, c90 = c00, c91 = c00, ca0 = c00, ca1 = c00,
         cb0 = c00, cb1 = c00;
#define CHORUS_ROW(i, r0, r1)                                               \
  do {                                                                      \
    int32_t pair;                                                           \
    std::memcpy(&pair, ap + (i)*is, sizeof(pair));                          \
    const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair)); \
    r0 = _mm512_dpbf16_ps(r0, a, b0);                                       \
    r1 = _mm512_dpbf16_ps(r1, a, b1);                                       \
  } while (0)
  for (int64_t q = 0; q < pairs; ++q) {
    const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(bp));
    const __m512bh b1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(bp + 32));
    CHORUS_ROW(0, c00, c01);
    CHORUS_ROW(1, c10, c11);
    CHORUS_ROW(2, c20, c21);
    CHORUS_ROW(3, c30, c31);
    CHORUS_ROW(4, c40, c41);
    CHORUS_ROW(5, c50, c51);
    CHORUS_ROW(6, c60, c61);
    CHORUS_ROW(7, c70, c71);
    CHORUS_ROW(8, c80, c81);
    CHORUS_ROW(9, c90, c91);
    CHORUS_ROW(10, ca0, ca1);
    CHORUS_ROW(11, cb0, cb1);
    ap += ps;
    bp += 2 * kNR;
  }
#undef CHORUS_ROW
  const __mmask16 m0 = nr >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32  ? __mmask16(0xFFFF)
                       : nr > 16 ? __mmask16((1u << (nr - 16)) - 1)
                                 : __mmask16(0);
  const __m512 va = _mm512_set1_ps(alpha);
#define CHORUS_STORE(i, r0, r1)                                           \
  do {                                                                    \
    if ((i) < mr) store_row(c + (i)*ldc, r0, r1, va, accumulate, m0, m1); \
  } while (0)
  CHORUS_STORE(0, c00, c01);
  CHORUS_STORE(1, c10, c11);
  CHORUS_STORE(2, c20, c21);
  CHORUS_STORE(3, c30, c31);
  CHORUS_STORE(4, c40, c41);
  CHORUS_STORE(5, c50, c51);
  CHORUS_STORE(6, c60, c61);
  CHORUS_STORE(7, c70, c71);
  CHORUS_STORE(8, c80, c81);
  CHORUS_STORE(9, c90, c91);
  CHORUS_STORE(10, ca0, ca1);
  CHORUS_STORE(11, cb0, cb1);
#undef CHORUS_STORE
}

// op(B)[:, j0:j0+32] as pairs (see the header comment) into dst (pairs * 64 values).
void pack_b_panel(bool tb, const uint16_t* b, int64_t ldb, int64_t k, int64_t n, int64_t j0,
                  uint16_t* dst) {
  const int64_t jn = std::min(kNR, n - j0), pairs = (k + 1) / 2;
  std::memset(dst, 0, static_cast<size_t>(pairs * 2 * kNR) * sizeof(uint16_t));
  for (int64_t p = 0; p < k; ++p) {
    uint16_t* row = dst + (p / 2) * 2 * kNR + (p & 1);
    if (!tb) {
      const uint16_t* src = b + p * ldb + j0;
      for (int64_t j = 0; j < jn; ++j) row[2 * j] = src[j];
    } else {
      for (int64_t j = 0; j < jn; ++j) row[2 * j] = b[(j0 + j) * ldb + p];
    }
  }
}

// op(A)[i0:i0+mb, :] as 12-row packed slices: pair q of row i at q*24 + 2i (zeros past mb, k).
void pack_a_rows(bool ta, const uint16_t* a, int64_t lda, int64_t i0, int64_t mb, int64_t k,
                 uint16_t* dst) {
  const int64_t pairs = (k + 1) / 2;
  for (int64_t ir = 0; ir < mb; ir += kMR) {
    uint16_t* panel = dst + ir * 2 * pairs;
    std::memset(panel, 0, static_cast<size_t>(pairs * 2 * kMR) * sizeof(uint16_t));
    const int64_t rows = std::min(kMR, mb - ir);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t p = 0; p < k; ++p)
        panel[(p / 2) * 2 * kMR + 2 * i + (p & 1)] =
            ta ? a[p * lda + i0 + ir + i] : a[(i0 + ir + i) * lda + p];
  }
}

void compute_rows(int64_t r0, int64_t r1, bool ta, int64_t n, int64_t k, float alpha,
                  const uint16_t* a, int64_t lda, const uint16_t* bp, bool accumulate, float* c,
                  int64_t ldc) {
  thread_local Scratch<uint16_t> a_scratch;
  const int64_t pairs = (k + 1) / 2, panels = (n + kNR - 1) / kNR;
  uint16_t* packed = a_scratch.get(static_cast<size_t>(kMC * 2 * pairs));
  const bool in_place = !ta && k % 2 == 0;
  for (int64_t i0 = r0; i0 < r1; i0 += kMC) {
    const int64_t mb = std::min(kMC, r1 - i0), full = in_place ? mb / kMR * kMR : 0;
    if (full < mb) pack_a_rows(ta, a, lda, i0 + full, mb - full, k, packed);
    for (int64_t jp = 0; jp < panels; ++jp) {
      const int64_t j0 = jp * kNR, nr = std::min(kNR, n - j0);
      const uint16_t* bpanel = bp + jp * pairs * 2 * kNR;
      for (int64_t ir = 0; ir < full; ir += kMR)
        kernel_bf16_12x32<false>(pairs, a + (i0 + ir) * lda, lda, bpanel, c + (i0 + ir) * ldc + j0,
                                 ldc, kMR, nr, alpha, accumulate);
      for (int64_t ir = full; ir < mb; ir += kMR)
        kernel_bf16_12x32<true>(pairs, packed + (ir - full) * 2 * pairs, 0, bpanel,
                                c + (i0 + ir) * ldc + j0, ldc, std::min(kMR, mb - ir), nr, alpha,
                                accumulate);
    }
  }
}

}  // namespace

bool blocked_bf16_available() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

void blocked_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                       bool accumulate, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.f);
    return;
  }
  thread_local Scratch<uint16_t> b_scratch;
  const int64_t pairs = (k + 1) / 2, panels = (n + kNR - 1) / kNR;
  uint16_t* bp = b_scratch.get(static_cast<size_t>(panels * pairs * 2 * kNR));
  parallel_for(panels, k * kNR, [&](int64_t s, int64_t e, int) {
    for (int64_t jp = s; jp < e; ++jp)
      pack_b_panel(tb, b, ldb, k, n, jp * kNR, bp + jp * pairs * 2 * kNR);
  });
  const int64_t row_panels = (m + kMR - 1) / kMR;
  parallel_for(row_panels, n * k * kMR, [&](int64_t s, int64_t e, int) {
    compute_rows(s * kMR, std::min(m, e * kMR), ta, n, k, alpha, a, lda, bp, accumulate, c, ldc);
  });
}

#else

bool blocked_bf16_available() { return false; }
void blocked_gemm_bf16(bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                       const uint16_t*, int64_t, bool, float*, int64_t) {}

#endif

}  // namespace chorus::tensor::gemm_impl
