// chorus::tensor — matrix multiply through the fastest kernel present, chosen by measurement.
//
// Backends (gemm/): "builtin" (ours, always present: a blocked 12 x 32 AVX-512 kernel where the
// CPU has AVX-512, a generic vectorised one elsewhere; also the f64 GEMM), "dnnl" (oneDNN's
// dnnl_sgemm, JIT for the CPU at hand) and "openblas" (cblas_sgemm). The libraries are opened at
// run time (dlopen), so a chorus binary runs where neither is installed. The backend is chosen
// per shape class (transposition pattern nn|nt|tn|tt x small|large): on first use every
// available f32 backend multiplies the same matrices at each class's shape (rounds alternating
// between backends, best round each); the fastest wins the class, the earlier one in the order
// builtin, dnnl, openblas when within 3% (noise cannot flip the choice from launch to launch).
// CHORUS_TENSOR_GEMM=dnnl|openblas|builtin forces one everywhere, "nt.large=dnnl,..." some
// classes; CHORUS_DEBUG=INFO logs the rates.
// Threads: one team for everything, chorus's own (CHORUS_TENSOR_THREADS; 0 = every core this
// process may run on). Rows of C are split over the team; a library is called once per row
// block from each team thread and kept single-threaded itself.
// Autocast bf16 GEMMs run, per shape class (transposition pattern x small/large), on our
// AVX512-BF16 kernel ("native"), oneDNN's bf16 matmul ("dnnl") or as f32 GEMMs of bf16-rounded
// operands ("f32"), whichever measures fastest by the same rule (docs/TENSOR.md, "Choosing the
// kernels"); CHORUS_TENSOR_BF16_GEMM forces all classes or some.
//
// Layout: row-major. C (M x N) = alpha * op(A) (M x K) @ op(B) (K x N) + beta * C, where op(A)
// is A or A^T as trans_a says; lda/ldb/ldc are row strides in elements. beta = 0 ignores C's
// contents (NaN included).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chorus/half.h"

namespace chorus::tensor {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc);
// 16-bit inputs, f32 accumulation and output: the mixed-precision matmul. Inputs are widened
// exactly, so results equal an f32 GEMM of the rounded values (up to summation order).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c,
          int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const Half* a,
          int64_t lda, const Half* b, int64_t ldb, float beta, float* c, int64_t ldc);

struct GemmBackendInfo {
  std::string name;
  bool available = false;
  double measured_gflops = 0;  // over the classes' selection shapes together; 0 when not measured
  std::string note;            // why unavailable, or the library that was opened
};

// The f32 GEMM plan in use (selects on first call): one backend name ("dnnl") when every shape
// class runs it, else "nn.small=builtin,nn.large=openblas,..." naming each of the eight classes.
std::string gemm_backend();
// Every backend with its availability and the rate measured during selection.
std::vector<GemmBackendInfo> gemm_backends();
// Forces the plan for this process (tests, benchmarks, ranks that must agree): a backend name
// (every class), or a list as gemm_backend() writes it, classes left out measured; "auto"
// measures every class again (a measured choice, as on first use). Setting a whole plan before
// the first GEMM skips the measurement. An unknown name or class, a malformed list or an
// unavailable backend throws InvalidArgument saying why.
void set_gemm_backend(const std::string& plan);
// The autocast bf16 GEMM plan in use: one method name ("native", "dnnl" or "f32") when every
// shape class runs it, else "nn.small=native,nn.large=dnnl,..." naming each of the eight classes
// (nn|nt|tn|tt . small|large); chosen on first call like the f32 plan. set_bf16_gemm_mode
// takes the same strings (classes left out of a list are measured; "auto" measures every class
// again, a measured choice as on first use): "native" falls back to
// "f32" where the kernel is missing; an unavailable "dnnl" or a malformed string throws
// InvalidArgument saying why.
std::string bf16_gemm_mode();
void set_bf16_gemm_mode(const std::string& mode);
// Chooses both without measuring, by a fixed rule, so that a run repeated makes the same choice:
// the backends the knobs force, else "builtin" for f32 and "native" for every bf16 class where
// the CPU has it. A choice made earlier by timing is replaced; one set by set_gemm_backend or
// set_bf16_gemm_mode stays. (The deterministic mode of the parallel layer pins them before
// anything computes; timing could pick differently from run to run and rank to rank.)
void pin_gemm_choices();

// GPU GEMMs (the CUDA backend's cuBLASLt products): whether f32 products may round their inputs
// to TF32 on tensor cores (f32 accumulation; results near 1e-3 relative instead of 1e-6). Off by
// default; CHORUS_TENSOR_TF32=1 or set_allow_tf32(true) turns it on. 16-bit and f64 products and
// the CPU are not affected.
bool allow_tf32();
void set_allow_tf32(bool allow);

// Threads used by parallel regions (GEMM and our kernels). On our own kernels (builtin, native
// and every non-GEMM op) the count changes no result's bits: each splits its work into pieces
// fixed by the shapes (a GEMM's rows in micro-panels, a reduction's partials per block of rows
// or elements), which the threads share out. A library backend (dnnl, openblas) is called once
// per thread's block of rows, and may round differently for another block size.
int num_threads();
void set_num_threads(int n);

}  // namespace chorus::tensor
