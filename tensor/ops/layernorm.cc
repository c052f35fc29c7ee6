// layernorm: x (N, C) [leading dims flattened], weight (C), bias (C) -> out (N, C).
// Saves x, weight and the per-row mean and rstd (N each); kernels in kernels/layernorm.cc.
#include "cpu/layernorm.h"
#include "ops/op_util.h"

namespace chorus::tensor {

Tensor layernorm(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, double eps) {
  check_defined(x_in, "layernorm", "input");
  check_defined(w_in, "layernorm", "weight");
  check_defined(b_in, "layernorm", "bias");
  const int64_t C = x_in.size(-1), N = x_in.numel() / std::max<int64_t>(C, 1);
  CHORUS_ARG_CHECK(w_in.shape() == Shape{C} && b_in.shape() == Shape{C}, "layernorm: weight ",
                   to_string(w_in.shape()), " and bias ", to_string(b_in.shape()), " must be (", C,
                   ")");
  CHORUS_ARG_CHECK(x_in.dtype() == w_in.dtype() && x_in.dtype() == b_in.dtype(),
                   "layernorm: mixed dtypes");
  const Tensor x = dense(x_in), w = dense(w_in), b = dense(b_in);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  Tensor mean = Tensor::empty({N}, x.dtype()), rstd = Tensor::empty({N}, x.dtype());
  dispatch_float(x.dtype(), "layernorm", [&](auto tag) {
    using T = decltype(tag);
    cpu::layernorm_forward(out.data<T>(), mean.data<T>(), rstd.data<T>(), x.data<T>(), w.data<T>(),
                           b.data<T>(), N, C, eps);
  });
  // backward: dx, dweight, dbias += (see kernels/layernorm.cc)
  return record("layernorm", out, {x_in, w_in, b_in},
                [x, w, mean, rstd, N, C](const Tensor& dy, GradSink& g) {
                  dispatch_float(dy.dtype(), "layernorm backward", [&](auto tag) {
                    using T = decltype(tag);
                    Tensor dx = g.grad(0), dw = g.grad(1), db = g.grad(2);
                    auto ptr = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
                    cpu::layernorm_backward(ptr(dx), ptr(dw), ptr(db), dy.data<T>(), x.data<T>(),
                                            w.data<T>(), mean.data<T>(), rstd.data<T>(), N, C);
                  });
                });
}

}  // namespace chorus::tensor
