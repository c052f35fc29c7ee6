// logsumexp: x (..., V) -> (...), log sum_v exp(x[..., v]) over the last dim.
#include "ops/op_util.h"

namespace chorus::tensor {

Tensor logsumexp(const Tensor& x_in) {
  check_defined(x_in, "logsumexp", "input");
  check_float(x_in, "logsumexp");
  CHORUS_ARG_CHECK(x_in.dim() >= 1 && x_in.size(-1) > 0,
                   "logsumexp: input needs a non-empty last dim, got ", to_string(x_in.shape()));
  const Tensor x = dense(x_in);
  Shape out_shape = x.shape();
  out_shape.pop_back();
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  backend_for(x.device()).logsumexp_forward(out, x);
  // backward: dx[n, v] += softmax(x[n])[v] * dy[n] (the saved output detached: no cycle)
  const Tensor lse = out.detach();
  return record("logsumexp", out, {x_in}, [x, lse](const Tensor& dy, GradSink& g) {
    if (Tensor dx = g.grad(0); dx.defined())
      backend_for(dy.device()).logsumexp_backward(dx, x, lse, dy);
  });
}

}  // namespace chorus::tensor
