// gelu: x (any shape) -> same shape, tanh approximation; CPU kernels in cpu/elementwise.cc.
#include "ops/op_util.h"

namespace chorus::tensor {

Tensor gelu(const Tensor& x_in) {
  check_defined(x_in, "gelu", "input");
  check_float(x_in, "gelu");
  const Tensor x = dense(x_in);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend_for(x.device()).gelu_forward(out, x);
  // backward: dx += gelu'(x) * dy (x saved; gelu' recomputed from it)
  return record("gelu", out, {x_in}, [x](const Tensor& dy, GradSink& g) {
    if (Tensor dx = g.grad(0); dx.defined()) backend_for(dy.device()).gelu_backward(dx, x, dy);
  });
}

}  // namespace chorus::tensor
