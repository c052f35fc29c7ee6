// Internal: the CPU's autocast GEMM (CpuBackend::autocast_operand and gemm_autocast).
#pragma once

#include <cstdint>

#include "chorus/tensor/tensor.h"

namespace chorus::tensor::cpu {

// The autocast operand: a dense copy of x (f32) rounded to the 16-bit `dtype`, stored as `dtype`
// (when some shape class runs a bf16 method) or as f32 holding the rounded values.
Tensor to_lowp(const Tensor& x, DataType dtype);

// c (m x n, row stride n) (+)= op(a) op(b) with operands made by to_lowp (stored as
// `operand_dtype`, row strides lda and ldb), f32 accumulation; the product is rounded to `dtype`
// before it is stored or added, as a 16-bit GEMM's output would be.
void mm_lowp(DataType dtype, DataType operand_dtype, bool ta, bool tb, int64_t m, int64_t n,
             int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb, float* c,
             bool accumulate);

}  // namespace chorus::tensor::cpu
