// Internal: the f32 GEMM backends and the builtin kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gemm/selection.h"  // first_within_margin, the rule of every measured choice here
#include "gemm/shape_class.h"

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
  virtual void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc) = 0;
};

std::unique_ptr<SgemmBackend> make_builtin_backend();
std::unique_ptr<SgemmBackend> make_dnnl_backend();      // dlopen libdnnl
std::unique_ptr<SgemmBackend> make_openblas_backend();  // dlopen libopenblas
// omp_set_num_threads of the OpenMP runtime a library already loaded (oneDNN's), or nullptr;
// loads nothing itself (gemm_libraries.cc).
auto loaded_omp_set_num_threads() -> void (*)(int);

// The blocked AVX-512 kernel (gemm_blocked.cc), parallel over the team; available() is false
// on CPUs (or compilers) without AVX-512.
bool blocked_sgemm_available();
void blocked_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// The native bf16 GEMM of autocast (gemm_blocked_bf16.cc), on CPUs with AVX512-BF16:
// c (m x n, row stride ldc) = round_bf16(alpha op(a) op(b)), or c += that when `accumulate`;
// a and b hold bf16 bit patterns. Parallel over the team.
bool blocked_bf16_available();
void blocked_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                       bool accumulate, float* c, int64_t ldc);
// oneDNN's bf16 matmul (gemm_dnnl_bf16.cc), opened at run time: c (m x n, row stride ldc) =
// alpha op(a) op(b) in f32 (not rounded); a and b hold bf16 bit patterns. Parallel over the
// team. Available where libdnnl.so.2 and a CPU its bf16 matmul supports are present.
bool dnnl_bf16_available();
std::string dnnl_bf16_note();  // the library opened, or why unavailable
void dnnl_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                    const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float* c,
                    int64_t ldc);

// The autocast bf16 GEMM, per shape class (bf16_selection.cc; the classes: gemm/shape_class.h).
// Each class runs one method, chosen on first use by measurement (CHORUS_TENSOR_BF16_GEMM or
// set_bf16_gemm_mode force them).
enum class Bf16Method : uint8_t { kNative, kDnnl, kF32 };
Bf16Method bf16_method(int c);
// Whether autocast operands are stored as bf16 (some class runs native or dnnl) or as f32
// holding the rounded values (every class runs f32).
bool bf16_operands_as_bf16();
// Fixes the plan without measuring (pin_gemm_choices): the knob's classes, native elsewhere.
void pin_bf16_gemm_choice();
// The generic kernels (gemm_builtin.cc): packed, register-blocked, row blocks over the team.
void builtin_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void builtin_dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                   int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

}  // namespace chorus::tensor::gemm_impl
