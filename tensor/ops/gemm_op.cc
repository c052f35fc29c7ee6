#include "ops/gemm_op.h"

#include <memory>

#include "gemm/backend.h"
#include "kernels/elementwise.h"
#include "kernels/simd.h"

namespace chorus::tensor {

// Two ways to run an autocast GEMM, chosen once by measurement (gemm_impl::native_bf16_gemm):
//   native: operands stored as bf16, multiplied by the AVX512-BF16 kernel;
//   f32:    operands stored as f32 holding values rounded to the 16-bit type, multiplied by
//           the f32 GEMM (exact: products of bf16/f16 values are exact in f32, sums in f32 as
//           in the native kernel). Where vdpbf16ps runs at half the rate of f32 FMAs (no AMX,
//           one port), this is the faster one. f16 always takes this way.
// Both round the product to the 16-bit type before storing or adding it.
Tensor to_lowp(const Tensor& x, DataType dtype) {
  const bool fast = x.dtype() == DataType::kF32 && x.is_contiguous();
  if (dtype == DataType::kBF16 && gemm_impl::native_bf16_gemm()) {
    Tensor out = Tensor::empty(x.shape(), dtype);
    if (fast)
      kernels::to_bf16(reinterpret_cast<uint16_t*>(out.data<BFloat16>()), x.data<float>(),
                       x.numel());
    else
      strided_copy(out, x);
    return out;
  }
  Tensor out = Tensor::empty(x.shape(), DataType::kF32);
  CHORUS_ARG_CHECK(x.dtype() == DataType::kF32, "autocast operand must be f32");
  const Tensor src = dense(x);
  kernels::round_to(out.data<float>(), src.data<float>(), x.numel(), dtype, false);
  return out;
}

void mm_lowp(DataType dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const Tensor& a,
             int64_t lda, const Tensor& b, int64_t ldb, float* c, bool accumulate) {
  if (a.dtype() == DataType::kBF16) {
    // bf16 dot products (vdpbf16ps), f32 accumulation, the result rounded in the kernel.
    gemm_impl::blocked_gemm_bf16(ta, tb, m, n, k, 1.f,
                                 reinterpret_cast<const uint16_t*>(a.data<BFloat16>()), lda,
                                 reinterpret_cast<const uint16_t*>(b.data<BFloat16>()), ldb,
                                 accumulate, c, n);
    return;
  }
  // f32 operands holding rounded values (to_lowp): f32 GEMM, then round the product.
  if (!accumulate) {
    gemm(ta, tb, m, n, k, 1.f, a.data<float>(), lda, b.data<float>(), ldb, 0.f, c, n);
    kernels::round_to(c, c, m * n, dtype, false);
    return;
  }
  Tensor prod = Tensor::empty({m, n});
  float* p = prod.data<float>();
  gemm(ta, tb, m, n, k, 1.f, a.data<float>(), lda, b.data<float>(), ldb, 0.f, p, n);
  kernels::round_to(c, p, m * n, dtype, true);
}

}  // namespace chorus::tensor
