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
  virtual void set_threads(int n) = 0;
  virtual void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                     float* c, int64_t ldc) = 0;
};

std::unique_ptr<SgemmBackend> make_builtin_backend();
std::unique_ptr<SgemmBackend> make_dnnl_backend();      // dlopen libdnnl
std::unique_ptr<SgemmBackend> make_openblas_backend();  // dlopen libopenblas

// The builtin kernels (gemm_builtin.cc): packed, register-blocked, OpenMP over row blocks.
void builtin_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc);
void builtin_dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                   const double* a, int64_t lda, const double* b, int64_t ldb, double beta,
                   double* c, int64_t ldc);

}  // namespace chorus::tensor::gemm_impl
