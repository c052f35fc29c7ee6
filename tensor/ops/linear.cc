// linear: x (N, K) @ weight (M, K)^T + bias (M) -> out (N, M); leading dims of x are N.
// Under autocast the GEMMs run on 16-bit operands (see amp.h); the bias add stays f32.
#include "chorus/tensor/amp.h"
#include "ops/op_util.h"

namespace chorus::tensor {
namespace {

// c (m x n) (+)= op(a) op(b) for dense row-major operands.
GemmArgs product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const Tensor& a, int64_t lda,
                 const Tensor& b, int64_t ldb, const Tensor& c, bool accumulate) {
  GemmArgs g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.lda = lda;
  g.b = b;
  g.ldb = ldb;
  g.c = c;
  g.ldc = n;
  g.accumulate = accumulate;
  return g;
}

}  // namespace

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in) {
  check_defined(x_in, "linear", "input");
  check_defined(w_in, "linear", "weight");
  CHORUS_ARG_CHECK(w_in.dim() == 2, "linear: weight must be (M, K), got ", to_string(w_in.shape()));
  CHORUS_ARG_CHECK(x_in.dim() >= 1 && x_in.size(-1) == w_in.size(1), "linear: input ",
                   to_string(x_in.shape()), " vs weight ", to_string(w_in.shape()));
  CHORUS_ARG_CHECK(x_in.dtype() == w_in.dtype(), "linear: dtypes ", to_string(x_in.dtype()), " vs ",
                   to_string(w_in.dtype()));
  check_float(x_in, "linear");
  // N: the leading dims of x (not numel / K, which K = 0 would break).
  const int64_t K = w_in.size(1), M = w_in.size(0),
                N = numel_of(Shape(x_in.shape().begin(), x_in.shape().end() - 1));
  if (b_in.defined())
    CHORUS_ARG_CHECK(b_in.shape() == Shape{M} && b_in.dtype() == x_in.dtype(),
                     "linear: bias must be (", M, ") of the input's dtype");
  Backend& be = backend_of("linear", {{x_in, "input"}, {w_in, "weight"}, {b_in, "bias"}});
  Shape out_shape = x_in.shape();
  out_shape.back() = M;
  Tensor out = Tensor::empty(out_shape, x_in.dtype(), x_in.device());
  const Tensor b = b_in.defined() ? dense(b_in) : Tensor();

  const DataType lowp = x_in.dtype() == DataType::kF32 ? autocast_dtype() : DataType::kF32;
  if (lowp != DataType::kF32) {
    // Autocast: save the 16-bit operands (half the bytes of the f32 ones).
    const Tensor x16 = be.autocast_operand(x_in, lowp), w16 = be.autocast_operand(w_in, lowp);
    be.gemm_autocast(lowp, product(false, true, N, M, K, x16, K, w16, K, out, false));
    if (b.defined()) be.add_bias(out, out, b);
    return record(
        "linear", out, {x_in, w_in, b_in},
        [x16, w16, N, M, K, lowp](const Tensor& dy, GradSink& g) {
          Backend& be = backend_for(dy.device());
          const Tensor dy16 = be.autocast_operand(dy, lowp);
          bool fresh = false;
          // dx (N, K) += dy (N, M) @ W (M, K)
          if (Tensor dx = g.grad_for_write(0, &fresh); dx.defined())
            be.gemm_autocast(lowp, product(false, false, N, K, M, dy16, M, w16, K, dx, !fresh));
          // dW (M, K) += dy^T (M, N) @ x (N, K)
          if (Tensor dw = g.grad_for_write(1, &fresh); dw.defined())
            be.gemm_autocast(lowp, product(true, false, M, K, N, dy16, M, x16, K, dw, !fresh));
          // dbias (M) += column sums of dy, in f32
          if (Tensor db = g.grad_for_write(2, &fresh); db.defined()) be.sum_rows(db, dy, fresh);
        });
  }

  const Tensor x = dense(x_in), w = dense(w_in);
  be.gemm(product(false, true, N, M, K, x, K, w, K, out, false));
  if (b.defined()) be.add_bias(out, out, b);
  return record("linear", out, {x_in, w_in, b_in}, [x, w, N, M, K](const Tensor& dy, GradSink& g) {
    Backend& be = backend_for(dy.device());
    // A fresh gradient buffer is assigned (beta = 0) instead of zeroed and accumulated.
    bool fresh = false;
    // dx (N, K) += dy (N, M) @ W (M, K)
    if (Tensor dx = g.grad_for_write(0, &fresh); dx.defined())
      be.gemm(product(false, false, N, K, M, dy, M, w, K, dx, !fresh));
    // dW (M, K) += dy^T (M, N) @ x (N, K)
    if (Tensor dw = g.grad_for_write(1, &fresh); dw.defined())
      be.gemm(product(true, false, M, K, N, dy, M, x, K, dw, !fresh));
    // dbias (M) += column sums of dy
    if (Tensor db = g.grad_for_write(2, &fresh); db.defined()) be.sum_rows(db, dy, fresh);
  });
}

}  // namespace chorus::tensor
