#include "ops/gemm_op.h"

#include <memory>

#include "kernels/elementwise.h"
#include "kernels/simd.h"

namespace chorus::tensor {

void round_to_lowp(float* x, int64_t n, DataType dtype) {
  parallel_for(n, 2, [&](int64_t b, int64_t e, int) {
    if (dtype == DataType::kBF16)
      for (int64_t i = b; i < e; ++i) x[i] = bf16_to_float(float_to_bf16(x[i]));
    else
      for (int64_t i = b; i < e; ++i) x[i] = half_to_float(float_to_half(x[i]));
  });
}

void mm_lowp(DataType dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const Tensor& a,
             int64_t lda, const Tensor& b, int64_t ldb, float* c, bool accumulate) {
  Tensor prod = Tensor::empty({m, n});
  float* p = prod.data<float>();
  if (dtype == DataType::kBF16)
    gemm(ta, tb, m, n, k, 1.f, a.data<BFloat16>(), lda, b.data<BFloat16>(), ldb, 0.f, p, n);
  else
    gemm(ta, tb, m, n, k, 1.f, a.data<Half>(), lda, b.data<Half>(), ldb, 0.f, p, n);
  round_to_lowp(p, m * n, dtype);
  if (accumulate)
    kernels::axpy(c, 1.f, p, m * n);
  else
    std::memcpy(c, p, static_cast<size_t>(m * n) * sizeof(float));
}

}  // namespace chorus::tensor
