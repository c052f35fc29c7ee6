// sum / mean: x (any shape) -> () scalar. Accumulated in double.
#include "ops/op_util.h"

namespace chorus::tensor {
namespace {

Tensor reduce_all(const Tensor& x_in, bool average) {
  const char* name = average ? "mean" : "sum";
  check_defined(x_in, name, "input");
  check_float(x_in, name);
  const Tensor x = dense(x_in);
  const int64_t n = x.numel();
  const double factor = average ? 1.0 / static_cast<double>(std::max<int64_t>(n, 1)) : 1.0;
  Tensor out = Tensor::empty({}, x.dtype(), x.device());
  backend_for(x.device()).sum(out, x, factor);
  // backward: dx[i] += factor * dy (dy is a scalar)
  return record(name, out, {x_in}, [factor](const Tensor& dy, GradSink& g) {
    if (Tensor dx = g.grad(0); dx.defined()) backend_for(dy.device()).add_scalar(dx, dy, factor);
  });
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce_all(x, false); }
Tensor mean(const Tensor& x) { return reduce_all(x, true); }

}  // namespace chorus::tensor
