// Builtin GEMM: the fallback that is always present, and the only f64 GEMM (gradient checks).
//
// Scheme (the classic Goto/BLIS loop nest, simplified): op(B) is packed once into column strips
// of NR columns (K x NR each, zero-padded), op(A) into row-major M x K when it is transposed.
// Rows are processed in blocks of MC (an A block stays in L2) and within a block a register-
// blocked micro-kernel computes MR x NR of C from one strip: per k, NR/L vector loads of B,
// MR broadcasts of A, MR*NR/L FMAs. Row blocks are spread over the tensor thread team.
// On CPUs with AVX-512 the f32 "builtin" backend is the blocked kernel of gemm_blocked.cc
// instead; this one remains the f64 GEMM and the f32 fallback elsewhere.
// The micro-kernel uses GCC vector extensions; the driver is compiled for AVX-512, AVX2 and
// baseline x86-64 (target_clones) and the loader picks the best one for the CPU at hand.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "chorus/error.h"
#include "cpu/simd.h"
#include "gemm/backend.h"

#define CHORUS_ALWAYS_INLINE inline __attribute__((always_inline))

namespace chorus::tensor::gemm_impl {
namespace {

// A 6 x 2-vector tile of 32-byte vectors: the 12 accumulators, two vectors of B and a broadcast
// fit the 16 registers of AVX2 (64-byte vectors spilled there, at 2 GFLOP/s instead of 77 on AMD
// EPYC Zen 3; AVX-512 CPUs run the blocked kernel for f32 instead).
constexpr int64_t kMR = 6;
constexpr int64_t kMC = 64;

template <class T>
struct Vec;
template <>
struct Vec<float> {
  typedef float type __attribute__((vector_size(32), aligned(4)));
  static constexpr int64_t kLanes = 8;
};
template <>
struct Vec<double> {
  typedef double type __attribute__((vector_size(32), aligned(8)));
  static constexpr int64_t kLanes = 4;
};

// C[0:mr, 0:nr] = alpha * A[0:mr, :] . Bstrip + beta * C, with A row-major (lda), Bstrip K x NR
// contiguous. NR = 2 vectors; rows past mr read row 0 and are not stored.
template <class T>
CHORUS_ALWAYS_INLINE void micro_kernel(int64_t mr, int64_t nr, int64_t k, T alpha, const T* a,
                                       int64_t lda, const T* bstrip, T beta, T* c, int64_t ldc) {
  using V = typename Vec<T>::type;
  constexpr int64_t L = Vec<T>::kLanes;
  V acc[kMR][2] = {};
  const T* rows[kMR];
  for (int64_t r = 0; r < kMR; ++r) rows[r] = a + (r < mr ? r * lda : 0);
  for (int64_t p = 0; p < k; ++p) {
    V b0, b1;
    std::memcpy(&b0, bstrip + p * 2 * L, sizeof(V));
    std::memcpy(&b1, bstrip + p * 2 * L + L, sizeof(V));
    for (int64_t r = 0; r < kMR; ++r) {
      const T x = rows[r][p];
      acc[r][0] += x * b0;
      acc[r][1] += x * b1;
    }
  }
  for (int64_t r = 0; r < mr; ++r) {
    T tmp[2 * L];
    std::memcpy(tmp, &acc[r][0], sizeof(V));
    std::memcpy(tmp + L, &acc[r][1], sizeof(V));
    T* crow = c + r * ldc;
    if (beta == T(0)) {
      for (int64_t j = 0; j < nr; ++j) crow[j] = alpha * tmp[j];
    } else {
      for (int64_t j = 0; j < nr; ++j) crow[j] = alpha * tmp[j] + beta * crow[j];
    }
  }
}

// One MC block of rows of C against every strip of packed B.
template <class T>
CHORUS_ALWAYS_INLINE void block_kernel(int64_t i0, int64_t i1, int64_t n, int64_t k, T alpha,
                                       const T* a, int64_t lda, const T* bp, T beta, T* c,
                                       int64_t ldc) {
  constexpr int64_t NR = 2 * Vec<T>::kLanes;
  const int64_t strips = (n + NR - 1) / NR;
  for (int64_t s = 0; s < strips; ++s) {
    const int64_t j0 = s * NR, nr = std::min(NR, n - j0);
    for (int64_t i = i0; i < i1; i += kMR)
      micro_kernel<T>(std::min(kMR, i1 - i), nr, k, alpha, a + i * lda, lda, bp + s * k * NR, beta,
                      c + i * ldc + j0, ldc);
  }
}

// The ISA-specific part is compiled once per target; the parallel region stays outside it.
CHORUS_TARGET_CLONES
void block_f32(int64_t i0, int64_t i1, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* bp, float beta, float* c, int64_t ldc) {
  block_kernel<float>(i0, i1, n, k, alpha, a, lda, bp, beta, c, ldc);
}
CHORUS_TARGET_CLONES
void block_f64(int64_t i0, int64_t i1, int64_t n, int64_t k, double alpha, const double* a,
               int64_t lda, const double* bp, double beta, double* c, int64_t ldc) {
  block_kernel<double>(i0, i1, n, k, alpha, a, lda, bp, beta, c, ldc);
}
inline void run_block(int64_t i0, int64_t i1, int64_t n, int64_t k, float alpha, const float* a,
                      int64_t lda, const float* bp, float beta, float* c, int64_t ldc) {
  block_f32(i0, i1, n, k, alpha, a, lda, bp, beta, c, ldc);
}
inline void run_block(int64_t i0, int64_t i1, int64_t n, int64_t k, double alpha, const double* a,
                      int64_t lda, const double* bp, double beta, double* c, int64_t ldc) {
  block_f64(i0, i1, n, k, alpha, a, lda, bp, beta, c, ldc);
}

template <class T>
void gemm_driver(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  constexpr int64_t NR = 2 * Vec<T>::kLanes;
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == T(0)) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  // Pack op(B) into strips: strip s holds columns [s*NR, s*NR+NR) as K rows of NR.
  const int64_t strips = (n + NR - 1) / NR;
  std::unique_ptr<T[]> bp(new T[static_cast<size_t>(strips * k * NR)]);
  parallel_for(strips, k * NR, [&](int64_t s0, int64_t s1, int) {
    for (int64_t s = s0; s < s1; ++s) {
      T* dst = bp.get() + s * k * NR;
      const int64_t j0 = s * NR, jn = std::min(NR, n - j0);
      for (int64_t p = 0; p < k; ++p) {
        T* row = dst + p * NR;
        for (int64_t j = 0; j < jn; ++j) row[j] = tb ? b[(j0 + j) * ldb + p] : b[p * ldb + j0 + j];
        for (int64_t j = jn; j < NR; ++j) row[j] = T(0);
      }
    }
  });
  // op(A) row-major.
  std::unique_ptr<T[]> ap;
  if (ta) {
    ap.reset(new T[static_cast<size_t>(m * k)]);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) ap[i * k + p] = a[p * lda + i];
    a = ap.get();
    lda = k;
  }
  const int64_t blocks = (m + kMC - 1) / kMC;
  parallel_for(blocks, kMC * n * k / 8, [&](int64_t b0, int64_t b1, int) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t i0 = blk * kMC, i1 = std::min(m, i0 + kMC);
      run_block(i0, i1, n, k, alpha, a, lda, bp.get(), beta, c, ldc);
    }
  });
}

}  // namespace

void builtin_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_driver<float>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void builtin_dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                   int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  gemm_driver<double>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

namespace {
class BuiltinBackend final : public SgemmBackend {
 public:
  const char* name() const override { return "builtin"; }
  std::string note() const override {
    return blocked_ ? "chorus blocked AVX-512 12x32 kernel" : "chorus packed micro-kernel";
  }
  bool available() const override { return true; }
  bool splits_rows_itself() const override { return true; }
  void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
             int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) override {
    if (blocked_)
      blocked_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else
      builtin_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }

 private:
  const bool blocked_ = blocked_sgemm_available();
};
}  // namespace

std::unique_ptr<SgemmBackend> make_builtin_backend() { return std::make_unique<BuiltinBackend>(); }

}  // namespace chorus::tensor::gemm_impl
