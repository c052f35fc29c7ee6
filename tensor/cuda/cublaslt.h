// Internal: the CUDA backend's GEMMs through cuBLASLt, opened at run time (chorus/
// dynamic_library.h), so that no binary needs libcublasLt to start: a machine without it fails
// the first device GEMM with a message saying what was looked for. CHORUS_TENSOR_CUBLASLT names
// the library to open (a path or a soname); by default libcublasLt.so.13, .so.12, then .so.
//
// Matrices are row-major as in gemm.h; a product is handed to cuBLASLt (column-major) as its
// transpose, C^T = op(B)^T op(A)^T, so no operand is copied. Compute: f32 (TF32 only when
// allowed: CUBLAS_COMPUTE_32F_FAST_TF32), f64 for f64 operands; 16-bit operands accumulate in
// f32 into an f32 C. The algorithm is cuBLASLt's first heuristic for the call's shape, types and
// alignments, asked once per shape and kept (pinned for the process).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "chorus/types.h"

namespace chorus::tensor::cuda {

// c_i (m x n, row stride ldc) = alpha op(a_i) op(b_i) + beta c_i, i < batch, x_i = x +
// stride_x * i elements; device pointers.
struct LtMatmul {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  DataType operands = DataType::kF32;  // a and b: f32, f64, bf16 or f16
  DataType output = DataType::kF32;    // c: f32 (f64 with f64 operands)
  double alpha = 1, beta = 0;
};

class CublasLt {
 public:
  // Empty when libcublasLt opens and has every function used here, else why not. Needs no device.
  static std::string load_error();

  // A handle on `device` (made current for the call). Throws chorus::Error when the library is
  // missing or the handle cannot be made.
  explicit CublasLt(int device);
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  // Queues the product on `stream` (a cudaStream_t) with `workspace` (device memory). Throws
  // InvalidArgument for types it does not take, chorus::Error when cuBLASLt refuses.
  void matmul(const LtMatmul& mm, bool allow_tf32, void* workspace, size_t workspace_bytes,
              void* stream);

  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

 private:
  using Key = std::tuple<int, int, int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, int64_t, int64_t, int, bool>;
  using Algo = std::array<uint64_t, 8>;  // cublasLtMatmulAlgo_t
  void* handle_ = nullptr;
  std::mutex mu_;
  std::map<Key, Algo> algos_;
};

}  // namespace chorus::tensor::cuda
