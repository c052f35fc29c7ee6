// linear: x (N, K) @ weight (M, K)^T + bias (M) -> out (N, M); leading dims of x are N.
// Under autocast the GEMMs run on 16-bit operands (see amp.h); the bias add stays f32.
#include "cpu/elementwise.h"
#include "ops/gemm_op.h"

namespace chorus::tensor {
Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in) {
  check_defined(x_in, "linear", "input");
  check_defined(w_in, "linear", "weight");
  CHORUS_ARG_CHECK(w_in.dim() == 2, "linear: weight must be (M, K), got ", to_string(w_in.shape()));
  CHORUS_ARG_CHECK(x_in.dim() >= 1 && x_in.size(-1) == w_in.size(1), "linear: input ",
                   to_string(x_in.shape()), " vs weight ", to_string(w_in.shape()));
  CHORUS_ARG_CHECK(x_in.dtype() == w_in.dtype(), "linear: dtypes ", to_string(x_in.dtype()), " vs ",
                   to_string(w_in.dtype()));
  const int64_t K = w_in.size(1), M = w_in.size(0), N = x_in.numel() / std::max<int64_t>(K, 1);
  if (b_in.defined())
    CHORUS_ARG_CHECK(b_in.shape() == Shape{M} && b_in.dtype() == x_in.dtype(),
                     "linear: bias must be (", M, ") of the input's dtype");
  Shape out_shape = x_in.shape();
  out_shape.back() = M;
  Tensor out = Tensor::empty(out_shape, x_in.dtype());
  const Tensor b = b_in.defined() ? dense(b_in) : Tensor();

  const DataType lowp = x_in.dtype() == DataType::kF32 ? autocast_dtype() : DataType::kF32;
  if (lowp != DataType::kF32) {
    // Autocast: save the 16-bit operands (half the bytes of the f32 ones).
    const Tensor x16 = to_lowp(x_in, lowp), w16 = to_lowp(w_in, lowp);
    float* o = out.data<float>();
    mm_lowp(lowp, false, true, N, M, K, x16, K, w16, K, o, false);
    if (b.defined()) cpu::add_bias_rows(o, b.data<float>(), N, M);
    return record(
        "linear", out, {x_in, w_in, b_in},
        [x16, w16, N, M, K, lowp](const Tensor& dy, GradSink& g) {
          const Tensor dy16 = to_lowp(dy, lowp);
          bool fresh = false;
          // dx (N, K) += dy (N, M) @ W (M, K)
          if (Tensor dx = g.grad_for_write(0, &fresh); dx.defined())
            mm_lowp(lowp, false, false, N, K, M, dy16, M, w16, K, dx.data<float>(), !fresh);
          // dW (M, K) += dy^T (M, N) @ x (N, K)
          if (Tensor dw = g.grad_for_write(1, &fresh); dw.defined())
            mm_lowp(lowp, true, false, M, K, N, dy16, M, x16, K, dw.data<float>(), !fresh);
          // dbias (M) += column sums of dy, in f32
          if (Tensor db = g.grad_for_write(2, &fresh); db.defined())
            cpu::sum_rows(db.data<float>(), dy.data<float>(), N, M, fresh);
        });
  }

  const Tensor x = dense(x_in), w = dense(w_in);
  dispatch_float(x.dtype(), "linear", [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    mm<T>(false, true, N, M, K, x.data<T>(), K, w.data<T>(), K, o, false);
    if (b.defined()) cpu::add_bias_rows(o, b.data<T>(), N, M);
  });
  return record("linear", out, {x_in, w_in, b_in}, [x, w, N, M, K](const Tensor& dy, GradSink& g) {
    dispatch_float(dy.dtype(), "linear backward", [&](auto tag) {
      using T = decltype(tag);
      // A fresh gradient buffer is assigned (beta = 0) instead of zeroed and accumulated.
      bool fresh = false;
      // dx (N, K) += dy (N, M) @ W (M, K)
      if (Tensor dx = g.grad_for_write(0, &fresh); dx.defined())
        mm<T>(false, false, N, K, M, dy.data<T>(), M, w.data<T>(), K, dx.data<T>(), !fresh);
      // dW (M, K) += dy^T (M, N) @ x (N, K)
      if (Tensor dw = g.grad_for_write(1, &fresh); dw.defined())
        mm<T>(true, false, M, K, N, dy.data<T>(), M, x.data<T>(), K, dw.data<T>(), !fresh);
      // dbias (M) += column sums of dy
      if (Tensor db = g.grad_for_write(2, &fresh); db.defined())
        cpu::sum_rows(db.data<T>(), dy.data<T>(), N, M, fresh);
    });
  });
}

}  // namespace chorus::tensor
