// The blocked AVX-512 f32 GEMM: the "builtin" backend on CPUs with AVX-512 (the generic kernel
// in gemm_builtin.cc covers the rest and f64).
//
// Scheme (Goto/BLIS): op(B) is packed once into panels of NR = 32 columns (K x 32 each, zero-
// padded), shared by every thread. Rows of C are split into one contiguous range per thread;
// within its range a thread walks K in blocks of KC and rows in blocks of MC, and for every B
// panel runs the 12 x 32 micro-kernel over the block's 12-row slices of op(A): read in place
// when A is not transposed, else packed into micro-panels (12 values per k, zero rows past M).
//
// Micro-kernel cost per k: 2 vector loads of B, 12 broadcasts of A, 24 FMAs into 24 zmm
// accumulators (12 rows x 2 vectors): FMA-bound. KC = 1024 takes the GPT's K (256 to 1024)
// whole: each C tile is written once instead of re-read per K block; B's micro-panel (up to
// 128 KiB) and A's 12-row slice then stream from L2, which keeps up (~15 B/cycle needed).
// Measured against KC = 256 and 512: 2-8% faster at every step shape. Reading A in place
// instead of packing it saves a pass over A (packing cost ~10% at K = 256).
// Edges: partial rows are zero rows of the packed A (never stored); partial columns use masked
// loads and stores of C.
//
// beta: the first K block applies the caller's beta (0 overwrites, so C may hold NaN garbage);
// later K blocks add (beta = 1).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "cpu/simd.h"
#include "gemm/backend.h"
#include "gemm/scratch.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CHORUS_HAVE_AVX512_GEMM 1
#define CHORUS_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma")))
#endif

namespace chorus::tensor::gemm_impl {

#if defined(CHORUS_HAVE_AVX512_GEMM)
namespace {

constexpr int64_t kMR = 12, kNR = 32, kKC = 1024, kMC = 120;

// One row of the micro-tile: cr[0:32] (masked) = alpha * (r0, r1) + beta * cr.
CHORUS_AVX512 inline void store_row(float* cr, __m512 r0, __m512 r1, __m512 va, __m512 vb,
                                    bool use_beta, __mmask16 m0, __mmask16 m1) {
  r0 = _mm512_mul_ps(r0, va);
  r1 = _mm512_mul_ps(r1, va);
  if (use_beta) {
    r0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, cr), r0);
    r1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, cr + 16), r1);
  }
  _mm512_mask_storeu_ps(cr, m0, r0);
  _mm512_mask_storeu_ps(cr + 16, m1, r1);
}

// How the micro-kernel reads its 12 x kc slice of op(A): element (i, p) at a[p * ps + i * is].
enum class AMode {
  kPacked,  // a packed micro-panel: ps = 12, is = 1
  kRows,    // A itself, not transposed: ps = 1, is = lda
};

// C[0:mr, 0:nr] = alpha * (A slice . B panel) + beta * C over kc steps.
template <AMode kMode>
CHORUS_AVX512 void kernel_12x32(int64_t kc, const float* __restrict ap, int64_t lda,
                                const float* __restrict bp, float* c, int64_t ldc, int64_t mr,
                                int64_t nr, float alpha, float beta) {
  const int64_t ps = kMode == AMode::kPacked ? kMR : 1;
  const int64_t is = kMode == AMode::kRows ? lda : 1;
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
         c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00,
         c70 = c00, c71 = c00, c80 = c00, c81 = c00, c90 = c00, c91 = c00, ca0 = c00, ca1 = c00,
         cb0 = c00, cb1 = c00;
#define CHORUS_ROW(i, r0, r1)                    \
  do {                                           \
    const __m512 a = _mm512_set1_ps(ap[(i)*is]); \
    r0 = _mm512_fmadd_ps(a, b0, r0);             \
    r1 = _mm512_fmadd_ps(a, b1, r1);             \
  } while (0)
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);
    _mm_prefetch(reinterpret_cast<const char*>(bp + 8 * kNR), _MM_HINT_T0);
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
    bp += kNR;
  }
#undef CHORUS_ROW
  const __mmask16 m0 = nr >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32  ? __mmask16(0xFFFF)
                       : nr > 16 ? __mmask16((1u << (nr - 16)) - 1)
                                 : __mmask16(0);
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#define CHORUS_STORE(i, r0, r1)                                                \
  do {                                                                         \
    if ((i) < mr) store_row(c + (i)*ldc, r0, r1, va, vb, beta != 0.f, m0, m1); \
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

// Packs op(B)[0:k, j0:j0+32] as k rows of 32 (zero past n) into dst.
void pack_b_panel(bool tb, const float* b, int64_t ldb, int64_t k, int64_t n, int64_t j0,
                  float* dst) {
  const int64_t jn = std::min(kNR, n - j0);
  if (!tb && jn == kNR) {
    // Fixed-size copies inline to two vector moves (a libc call per 128 bytes costs ~2x).
    for (int64_t p = 0; p < k; ++p)
      std::memcpy(dst + p * kNR, b + p * ldb + j0, sizeof(float) * kNR);
  } else if (!tb) {
    for (int64_t p = 0; p < k; ++p) {
      float* row = dst + p * kNR;
      std::memcpy(row, b + p * ldb + j0, static_cast<size_t>(jn) * sizeof(float));
      for (int64_t j = jn; j < kNR; ++j) row[j] = 0.f;
    }
  } else {
    for (int64_t j = 0; j < jn; ++j) {
      const float* col = b + (j0 + j) * ldb;
      for (int64_t p = 0; p < k; ++p) dst[p * kNR + j] = col[p];
    }
    for (int64_t j = jn; j < kNR; ++j)
      for (int64_t p = 0; p < k; ++p) dst[p * kNR + j] = 0.f;
  }
}

// Packs op(A)[i0:i0+mb, p0:p0+kc] as micro-panels of 12 rows (each kc x 12, zero rows past mb).
void pack_a_block(bool ta, const float* a, int64_t lda, int64_t i0, int64_t mb, int64_t p0,
                  int64_t kc, float* dst) {
  if (ta) {
    // Row p of A^T holds the block's mb values of column p contiguously: one pass over it
    // fills that k of every micro-panel (fixed-size copies inline to vector moves).
    for (int64_t p = 0; p < kc; ++p) {
      const float* src = a + (p0 + p) * lda + i0;
      for (int64_t ir = 0; ir < mb; ir += kMR) {
        float* out = dst + ir * kc + p * kMR;
        const int64_t rows = std::min(kMR, mb - ir);
        if (rows == kMR) {
          std::memcpy(out, src + ir, sizeof(float) * kMR);
        } else {
          for (int64_t i = 0; i < rows; ++i) out[i] = src[ir + i];
          for (int64_t i = rows; i < kMR; ++i) out[i] = 0.f;
        }
      }
    }
    return;
  }
  for (int64_t ir = 0; ir < mb; ir += kMR) {
    const int64_t rows = std::min(kMR, mb - ir);
    float* panel = dst + ir * kc;
    for (int64_t i = 0; i < rows; ++i) {
      const float* src = a + (i0 + ir + i) * lda + p0;
      for (int64_t p = 0; p < kc; ++p) panel[p * kMR + i] = src[p];
    }
    for (int64_t i = rows; i < kMR; ++i)
      for (int64_t p = 0; p < kc; ++p) panel[p * kMR + i] = 0.f;
  }
}

// Rows [r0, r1) of C against the packed B (panels of k x 32). When A is not transposed, full
// 12-row slices are read in place (the rows stay in L2 across the B panels) and only a partial
// last slice is packed (zero rows), so the kernel never reads past A. A transposed (the weight
// gradient) is packed: read in place, each k would touch 12 floats straddling cache lines
// (measured 10-15% slower).
void compute_rows(int64_t r0, int64_t r1, bool ta, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* bp, float beta, float* c, int64_t ldc) {
  thread_local Scratch<float> a_scratch;
  float* packed = a_scratch.get(static_cast<size_t>(kMC * kKC));
  const int64_t panels = (n + kNR - 1) / kNR;
  for (int64_t p0 = 0; p0 < k; p0 += kKC) {
    const int64_t kc = std::min(kKC, k - p0);
    const float b_eff = p0 == 0 ? beta : 1.f;
    for (int64_t i0 = r0; i0 < r1; i0 += kMC) {
      const int64_t mb = std::min(kMC, r1 - i0), full = ta ? 0 : mb / kMR * kMR;
      if (full < mb) pack_a_block(ta, a, lda, i0 + full, mb - full, p0, kc, packed);
      for (int64_t jp = 0; jp < panels; ++jp) {
        const int64_t j0 = jp * kNR, nr = std::min(kNR, n - j0);
        const float* bpanel = bp + jp * k * kNR + p0 * kNR;
        for (int64_t ir = 0; ir < full; ir += kMR)
          kernel_12x32<AMode::kRows>(kc, a + (i0 + ir) * lda + p0, lda, bpanel,
                                     c + (i0 + ir) * ldc + j0, ldc, kMR, nr, alpha, b_eff);
        for (int64_t ir = full; ir < mb; ir += kMR)
          kernel_12x32<AMode::kPacked>(kc, packed + (ir - full) * kc, 0, bpanel,
                                       c + (i0 + ir) * ldc + j0, ldc, std::min(kMR, mb - ir), nr,
                                       alpha, b_eff);
      }
    }
  }
}

}  // namespace

bool blocked_sgemm_available() { return __builtin_cpu_supports("avx512f"); }

void blocked_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.f) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
    return;
  }
  // Pack all of op(B): panel jp at bp + jp * k * 32.
  thread_local Scratch<float> b_scratch;
  const int64_t panels = (n + kNR - 1) / kNR;
  float* bp = b_scratch.get(static_cast<size_t>(panels * k * kNR));
  parallel_for(panels, k * kNR, [&](int64_t s, int64_t e, int) {
    for (int64_t jp = s; jp < e; ++jp) pack_b_panel(tb, b, ldb, k, n, jp * kNR, bp + jp * k * kNR);
  });
  // Rows split over the team in multiples of MR (task t gets micro-panels [t*P/T, (t+1)*P/T)).
  const int64_t row_panels = (m + kMR - 1) / kMR;
  parallel_for(row_panels, 2 * n * k * kMR, [&](int64_t s, int64_t e, int) {
    compute_rows(s * kMR, std::min(m, e * kMR), ta, n, k, alpha, a, lda, bp, beta, c, ldc);
  });
}

#else  // no AVX-512 build support: the generic kernel serves.

bool blocked_sgemm_available() { return false; }
void blocked_sgemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                   const float*, int64_t, float, float*, int64_t) {}

#endif

}  // namespace chorus::tensor::gemm_impl
