// chorus::tensor — matrix multiply through the fastest library present, chosen by measurement.
//
// Backends (gemm/): "dnnl" (oneDNN's dnnl_sgemm, JIT for the CPU at hand), "openblas"
// (cblas_sgemm) and "builtin" (ours: always present, vectorised, also does f64). The libraries
// are opened at run time (dlopen), so a chorus binary runs where neither is installed and uses
// the best one where both are. On first use every available f32 backend multiplies the same
// matrices at a GPT-like shape; the fastest wins. CHORUS_TENSOR_GEMM=dnnl|openblas|builtin
// forces one. Threads: CHORUS_TENSOR_THREADS (0 = every core this process may run on) sets the
// OpenMP team that both our kernels and oneDNN use.
//
// Layout: row-major. C (M x N) = alpha * op(A) (M x K) @ op(B) (K x N) + beta * C, where op(A)
// is A or A^T as trans_a says; lda/ldb/ldc are row strides in elements.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chorus/half.h"

namespace chorus::tensor {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc);
// 16-bit inputs, f32 accumulation and output: the mixed-precision matmul. Inputs are widened
// exactly, so results equal an f32 GEMM of the rounded values (up to summation order).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c,
          int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const Half* a, int64_t lda, const Half* b, int64_t ldb, float beta, float* c,
          int64_t ldc);

struct GemmBackendInfo {
  std::string name;
  bool available = false;
  double measured_gflops = 0;  // at the selection shape; 0 when not measured
  std::string note;            // why unavailable, or the library that was opened
};

// The backend f32 GEMMs go to (selects on first call).
std::string gemm_backend();
// Every backend with its availability and the rate measured during selection.
std::vector<GemmBackendInfo> gemm_backends();
// Forces a backend by name for this process (tests, benchmarks); throws if unavailable.
void set_gemm_backend(const std::string& name);

// Threads used by parallel regions (GEMM and our kernels).
int num_threads();
void set_num_threads(int n);

}  // namespace chorus::tensor
