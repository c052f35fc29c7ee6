// dropout: x (any shape) -> same shape. Element i (row-major) is kept when
// uniform_at(key, i) >= p and then scaled by 1/(1-p). The mask is never stored: backward
// regenerates it from the key, which is also what makes checkpoint recomputation exact.
#include "ops/op_util.h"

namespace chorus::tensor {

Tensor dropout(const Tensor& x_in, double p, RngKey key) {
  check_defined(x_in, "dropout", "input");
  CHORUS_ARG_CHECK(p >= 0.0 && p < 1.0, "dropout: p = ", p, " outside [0, 1)");
  if (p == 0.0) return x_in;
  check_float(x_in, "dropout");
  const Tensor x = dense(x_in);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend_for(x.device()).dropout(out, x, p, key, /*accumulate=*/false);
  // backward: dx += mask * dy / (1 - p)
  return record("dropout", out, {x_in}, [p, key](const Tensor& dy, GradSink& g) {
    if (Tensor dx = g.grad(0); dx.defined())
      backend_for(dy.device()).dropout(dx, dy, p, key, /*accumulate=*/true);
  });
}

}  // namespace chorus::tensor
