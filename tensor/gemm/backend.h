// Internal: the f32 GEMM backends and the builtin kernels.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace chorus::tensor::gemm_impl {

// One library that can run a row-major sgemm.
class SgemmBackend {
 public:
  virtual ~SgemmBackend() = default;
  virtual const char* name() const = 0;
  // Where it came from ("libdnnl.so.2"), or why it is unavailable.
  virtual std::string note() const = 0;
  virtual bool available() const = 0;
  // True when sgemm() spreads its rows over the tensor thread team itself; otherwise sgemm()
  // runs on the calling thread only, and gemm() calls it once per row block from the team.
  virtual bool splits_rows_itself() const { return false; }
  virtual void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                     float* c, int64_t ldc) = 0;
};

std::unique_ptr<SgemmBackend> make_builtin_backend();
std::unique_ptr<SgemmBackend> make_dnnl_backend();      // dlopen libdnnl
std::unique_ptr<SgemmBackend> make_openblas_backend();  // dlopen libopenblas

// The blocked AVX-512 kernel (gemm_blocked.cc), parallel over the team; available() is false
// on CPUs (or compilers) without AVX-512.
bool blocked_sgemm_available();
void blocked_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc);
// The native bf16 GEMM of autocast (gemm_blocked_bf16.cc), on CPUs with AVX512-BF16:
// c (m x n, row stride ldc) = round_bf16(alpha op(a) op(b)), or c += that when `accumulate`;
// a and b hold bf16 bit patterns. Parallel over the team.
bool blocked_bf16_available();
void blocked_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                       bool accumulate, float* c, int64_t ldc);
// Whether autocast bf16 GEMMs use blocked_gemm_bf16 (true) or the f32 GEMM on rounded
// operands: measured once (CHORUS_TENSOR_BF16_GEMM=native|f32 forces it).
bool native_bf16_gemm();
// The generic kernels (gemm_builtin.cc): packed, register-blocked, row blocks over the team.
void builtin_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc);
void builtin_dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                   const double* a, int64_t lda, const double* b, int64_t ldb, double beta,
                   double* c, int64_t ldc);

}  // namespace chorus::tensor::gemm_impl
