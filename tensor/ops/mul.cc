// mul (element-wise product of two same-shape tensors) and scale (product with a constant).
#include "ops/op_util.h"

namespace chorus::tensor {

// ---- mul: a (any), b (same) -> out (same)
// ---------------------------------------------------------
Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  check_same(a_in, b_in, "mul");
  check_float(a_in, "mul");
  const Tensor a = dense(a_in), b = dense(b_in);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  backend_for(a.device()).mul(out, a, b);
  // backward: da += b * dy, db += a * dy
  return record("mul", out, {a_in, b_in}, [a, b](const Tensor& dy, GradSink& g) {
    backend_for(dy.device()).mul_backward(g.grad(0), g.grad(1), a, b, dy);
  });
}

// ---- scale: a (any) -> factor * a
// ----------------------------------------------------------------
Tensor scale(const Tensor& a_in, double factor) {
  check_defined(a_in, "scale", "input");
  check_float(a_in, "scale");
  const Tensor a = dense(a_in);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  backend_for(a.device()).scale(out, a, factor);
  // backward: da += factor * dy
  return record("scale", out, {a_in}, [factor](const Tensor& dy, GradSink& g) {
    if (Tensor da = g.grad(0); da.defined()) backend_for(dy.device()).axpy(da, factor, dy);
  });
}

}  // namespace chorus::tensor
