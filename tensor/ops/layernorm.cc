// layernorm: x (N, C) [leading dims flattened], weight (C), bias (C) -> out (N, C).
// Saves x, weight and the per-row mean and rstd (N each); CPU kernels in cpu/layernorm.cc.
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
  check_float(x_in, "layernorm");
  Backend& be = backend_of("layernorm", {{x_in, "input"}, {w_in, "weight"}, {b_in, "bias"}});
  const Tensor x = dense(x_in), w = dense(w_in), b = dense(b_in);
  const Device dev = x.device();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), dev);
  Tensor mean = Tensor::empty({N}, x.dtype(), dev), rstd = Tensor::empty({N}, x.dtype(), dev);
  be.layernorm_forward(out, mean, rstd, x, w, b, eps);
  // backward: dx, dweight, dbias += (see cpu/layernorm.cc)
  return record("layernorm", out, {x_in, w_in, b_in},
                [x, w, mean, rstd](const Tensor& dy, GradSink& g) {
                  backend_for(dy.device())
                      .layernorm_backward(g.grad(0), g.grad(1), g.grad(2), dy, x, w, mean, rstd);
                });
}

}  // namespace chorus::tensor
