// matmul: a (..., M, K) @ b (K, N) -> (..., M, N), or batched a (Bt, M, K) @ b (Bt, K, N).
#include "chorus/tensor/amp.h"
#include "ops/op_util.h"

namespace chorus::tensor {
namespace {

// Bt GEMMs c_i (m x n) (+)= op(a_i) op(b_i) over dense operands, `sa`/`sb`/`sc` elements apart.
GemmArgs batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const Tensor& a, int64_t lda,
                 int64_t sa, const Tensor& b, int64_t ldb, int64_t sb, const Tensor& c, int64_t sc,
                 int64_t batch, bool accumulate) {
  GemmArgs g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.lda = lda;
  g.stride_a = sa;
  g.b = b;
  g.ldb = ldb;
  g.stride_b = sb;
  g.c = c;
  g.ldc = n;
  g.stride_c = sc;
  g.batch = batch;
  g.accumulate = accumulate;
  return g;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  check_defined(a_in, "matmul", "a");
  check_defined(b_in, "matmul", "b");
  CHORUS_ARG_CHECK(a_in.dtype() == b_in.dtype(), "matmul: dtypes ", to_string(a_in.dtype()), " vs ",
                   to_string(b_in.dtype()));
  CHORUS_ARG_CHECK(a_in.dim() >= 2 && (b_in.dim() == 2 || b_in.dim() == 3), "matmul: a ",
                   to_string(a_in.shape()), " b ", to_string(b_in.shape()));
  check_float(a_in, "matmul");
  const bool is_batched = b_in.dim() == 3;
  const int64_t K = a_in.size(-1), N = b_in.size(-1);
  CHORUS_ARG_CHECK(b_in.size(-2) == K, "matmul: inner dims ", to_string(a_in.shape()), " @ ",
                   to_string(b_in.shape()));
  if (is_batched)
    CHORUS_ARG_CHECK(a_in.dim() == 3 && a_in.size(0) == b_in.size(0),
                     "matmul: batched needs a (Bt, M, K), b (Bt, K, N), got ",
                     to_string(a_in.shape()), " @ ", to_string(b_in.shape()));
  Backend& be = backend_of("matmul", {{a_in, "a"}, {b_in, "b"}});
  // Per batch: a_i (M, K) @ b_i (K, N); the unbatched form is one batch of M = all rows of a.
  const int64_t Bt = is_batched ? a_in.size(0) : 1;
  const int64_t M =
      is_batched ? a_in.size(1) : numel_of(Shape(a_in.shape().begin(), a_in.shape().end() - 1));
  Shape out_shape = a_in.shape();
  out_shape.back() = N;
  Tensor out = Tensor::empty(out_shape, a_in.dtype(), a_in.device());
  const int64_t sb = is_batched ? K * N : 0;  // db accumulates over the batches of a shared b

  const DataType lowp = a_in.dtype() == DataType::kF32 ? autocast_dtype() : DataType::kF32;
  if (lowp != DataType::kF32) {
    const Tensor a16 = be.autocast_operand(a_in, lowp), b16 = be.autocast_operand(b_in, lowp);
    be.gemm_autocast(
        lowp, batched(false, false, M, N, K, a16, K, M * K, b16, N, sb, out, M * N, Bt, false));
    return record("matmul", out, {a_in, b_in},
                  [a16, b16, Bt, M, N, K, sb, lowp](const Tensor& dy, GradSink& g) {
                    Backend& be = backend_for(dy.device());
                    const Tensor dy16 = be.autocast_operand(dy, lowp);
                    // da_i (M, K) += dy_i (M, N) @ b_i^T
                    if (Tensor da = g.grad(0); da.defined())
                      be.gemm_autocast(lowp, batched(false, true, M, K, N, dy16, N, M * N, b16, N,
                                                     sb, da, M * K, Bt, true));
                    // db_i (K, N) += a_i^T (K, M) @ dy_i
                    if (Tensor db = g.grad(1); db.defined())
                      be.gemm_autocast(lowp, batched(true, false, K, N, M, a16, K, M * K, dy16, N,
                                                     M * N, db, sb, Bt, true));
                  });
  }

  const Tensor a = dense(a_in), b = dense(b_in);
  be.gemm(batched(false, false, M, N, K, a, K, M * K, b, N, sb, out, M * N, Bt, false));
  return record(
      "matmul", out, {a_in, b_in}, [a, b, Bt, M, N, K, sb](const Tensor& dy, GradSink& g) {
        Backend& be = backend_for(dy.device());
        // da_i (M, K) += dy_i (M, N) @ b_i^T (N, K)
        if (Tensor da = g.grad(0); da.defined())
          be.gemm(batched(false, true, M, K, N, dy, N, M * N, b, N, sb, da, M * K, Bt, true));
        // db_i (K, N) += a_i^T (K, M) @ dy_i (M, N)
        if (Tensor db = g.grad(1); db.defined())
          be.gemm(batched(true, false, K, N, M, a, K, M * K, dy, N, M * N, db, sb, Bt, true));
      });
}

}  // namespace chorus::tensor
