#include "cpu/autocast_gemm.h"

#include "chorus/tensor/gemm.h"
#include "cpu/elementwise.h"
#include "cpu/simd.h"
#include "cpu/strided.h"
#include "gemm/backend.h"

namespace chorus::tensor::cpu {

// The autocast GEMM (see gemm/bf16_selection.cc): operands rounded to the 16-bit type once,
// stored as bf16 when some shape class runs a bf16 method (our AVX512-BF16 kernel or oneDNN's
// matmul), else as f32 holding the rounded values; each GEMM then runs its shape class's method:
//   native: bf16 dot products (vdpbf16ps), f32 accumulation, the result rounded in the kernel;
//   dnnl:   oneDNN's bf16 matmul into f32, then rounded;
//   f32:    the f32 GEMM on f32 operands (widened exactly from bf16 storage when needed), then
//           rounded. Exact too: products of bf16/f16 values are exact in f32 and the sums run in
//           f32 as in the others. f16 always takes this way.
// Every way rounds the product to the 16-bit type before storing or adding it.
Tensor to_lowp(const Tensor& x, DataType dtype) {
  const bool fast = x.dtype() == DataType::kF32 && x.is_contiguous();
  if (dtype == DataType::kBF16 && gemm_impl::bf16_operands_as_bf16()) {
    Tensor out = Tensor::empty(x.shape(), dtype);
    if (fast)
      to_bf16(reinterpret_cast<uint16_t*>(out.data<BFloat16>()), x.data<float>(), x.numel());
    else
      strided_copy(out, x);
    return out;
  }
  Tensor out = Tensor::empty(x.shape(), DataType::kF32);
  CHORUS_ARG_CHECK(x.dtype() == DataType::kF32, "autocast operand must be f32");
  Tensor src = x;
  if (!fast) {
    src = Tensor::empty(x.shape(), x.dtype());
    strided_copy(src, x);
  }
  round_to(out.data<float>(), src.data<float>(), x.numel(), dtype, false);
  return out;
}

namespace {

// An f32 copy of the `count` bf16 values at x (exact). Temporaries are tensors: their buffers
// come from the block cache, not fresh pages.
Tensor widened(const void* x, int64_t count) {
  Tensor out = Tensor::empty({count}, DataType::kF32);
  from_bf16(out.data<float>(), static_cast<const uint16_t*>(x), count);
  return out;
}

// Elements an operand of `rows` rows of `cols` at row stride `ld` spans.
int64_t span_of(int64_t rows, int64_t cols, int64_t ld) {
  return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols;
}

}  // namespace

void mm_lowp(DataType dtype, DataType operand_dtype, bool ta, bool tb, int64_t m, int64_t n,
             int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb, float* c,
             bool accumulate) {
  if (operand_dtype == DataType::kBF16) {
    const auto* a16 = static_cast<const uint16_t*>(a);
    const auto* b16 = static_cast<const uint16_t*>(b);
    switch (gemm_impl::bf16_method(gemm_impl::shape_class(ta, tb, m, n, k))) {
      case gemm_impl::Bf16Method::kNative:
        gemm_impl::blocked_gemm_bf16(ta, tb, m, n, k, 1.f, a16, lda, b16, ldb, accumulate, c, n);
        return;
      case gemm_impl::Bf16Method::kDnnl: {
        if (!accumulate) {
          gemm_impl::dnnl_gemm_bf16(ta, tb, m, n, k, 1.f, a16, lda, b16, ldb, c, n);
          round_to(c, c, m * n, dtype, false);
          return;
        }
        Tensor prod = Tensor::empty({m, n});
        gemm_impl::dnnl_gemm_bf16(ta, tb, m, n, k, 1.f, a16, lda, b16, ldb, prod.data<float>(), n);
        round_to(c, prod.data<float>(), m * n, dtype, true);
        return;
      }
      case gemm_impl::Bf16Method::kF32: {
        const Tensor wa = widened(a, ta ? span_of(k, m, lda) : span_of(m, k, lda));
        const Tensor wb = widened(b, tb ? span_of(n, k, ldb) : span_of(k, n, ldb));
        mm_lowp(dtype, DataType::kF32, ta, tb, m, n, k, wa.data_ptr(), lda, wb.data_ptr(), ldb, c,
                accumulate);
        return;
      }
    }
  }
  // f32 operands holding rounded values (to_lowp): f32 GEMM, then round the product.
  const auto* af = static_cast<const float*>(a);
  const auto* bf = static_cast<const float*>(b);
  if (!accumulate) {
    gemm(ta, tb, m, n, k, 1.f, af, lda, bf, ldb, 0.f, c, n);
    round_to(c, c, m * n, dtype, false);
    return;
  }
  Tensor prod = Tensor::empty({m, n});
  float* p = prod.data<float>();
  gemm(ta, tb, m, n, k, 1.f, af, lda, bf, ldb, 0.f, p, n);
  round_to(c, p, m * n, dtype, true);
}

}  // namespace chorus::tensor::cpu
