// softmax over the last dim: x (N, V) [leading dims flattened] -> y (N, V). Saves y.
#include "ops/op_util.h"

namespace chorus::tensor {

Tensor softmax(const Tensor& x_in) {
  check_defined(x_in, "softmax", "input");
  CHORUS_ARG_CHECK(x_in.dim() >= 1, "softmax of a 0-dim tensor");
  check_float(x_in, "softmax");
  const Tensor x = dense(x_in);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend_for(x.device()).softmax_forward(y, x);
  // backward: dx += y * (dy - sum(dy * y)), row by row. The node saves y: hold it detached so
  // the saved tensor does not keep its own node alive (a cycle).
  const Tensor saved = y.detach();
  return record("softmax", y, {x_in}, [saved](const Tensor& dy, GradSink& g) {
    if (Tensor dx = g.grad(0); dx.defined())
      backend_for(dy.device()).softmax_backward(dx, saved, dy);
  });
}

}  // namespace chorus::tensor
