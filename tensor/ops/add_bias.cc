// add_bias: x (N, C) [any leading dims flattened to N] + bias (C) on every row -> (N, C).
// backward: dx += dy;  dbias += column sums of dy.
#include "ops/op_util.h"

namespace chorus::tensor {

Tensor add_bias(const Tensor& x_in, const Tensor& b_in) {
  check_defined(x_in, "add_bias", "input");
  check_defined(b_in, "add_bias", "bias");
  CHORUS_ARG_CHECK(x_in.dim() >= 1 && b_in.dim() == 1 && b_in.size(0) == x_in.size(-1),
                   "add_bias: input ", to_string(x_in.shape()), " vs bias ",
                   to_string(b_in.shape()));
  CHORUS_ARG_CHECK(x_in.dtype() == b_in.dtype(), "add_bias: dtypes ", to_string(x_in.dtype()),
                   " vs ", to_string(b_in.dtype()));
  check_float(x_in, "add_bias");
  Backend& be = backend_of("add_bias", {{x_in, "input"}, {b_in, "bias"}});
  const Tensor x = dense(x_in), b = dense(b_in);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  be.add_bias(out, x, b);
  return record("add_bias", out, {x_in, b_in}, [](const Tensor& dy, GradSink& g) {
    Backend& be = backend_for(dy.device());
    bool fresh = false;
    if (Tensor dx = g.grad_for_write(0, &fresh); dx.defined()) {
      if (fresh)
        be.copy(dx, dy, /*accumulate=*/false);
      else
        be.axpy(dx, 1.0, dy);
    }
    if (Tensor db = g.grad_for_write(1, &fresh); db.defined()) be.sum_rows(db, dy, fresh);
  });
}

}  // namespace chorus::tensor
