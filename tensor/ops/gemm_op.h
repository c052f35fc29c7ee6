// Internal: the GEMM calls of linear() and matmul(), in full or autocast precision.
#pragma once

#include "chorus/tensor/amp.h"
#include "chorus/tensor/gemm.h"
#include "ops/op_util.h"

namespace chorus::tensor {

// c (m x n, row stride n) = op(a) op(b)  [accumulate: c += ...], in T's precision.
template <class T>
void mm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
        int64_t ldb, T* c, bool accumulate) {
  gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, accumulate ? T(1) : T(0), c, n);
}

// The autocast operand: a dense copy of x rounded to the 16-bit `dtype`, stored as `dtype`
// (native bf16 GEMM) or as f32 holding the rounded values (see gemm_op.cc).
Tensor to_lowp(const Tensor& x, DataType dtype);

// c (m x n) (+)= op(a) op(b) with to_lowp operands a, b, f32 accumulation; the product is
// rounded to `dtype` before it is stored or added, as a 16-bit GEMM's output would be.
void mm_lowp(DataType dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const Tensor& a,
             int64_t lda, const Tensor& b, int64_t ldb, float* c, bool accumulate);

}  // namespace chorus::tensor
