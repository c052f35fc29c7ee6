// mul (element-wise product of two same-shape tensors) and scale (product with a constant).
#include "cpu/elementwise.h"
#include "ops/op_util.h"

namespace chorus::tensor {

// ---- mul: a (any), b (same) -> out (same)
// ---------------------------------------------------------
Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  check_same(a_in, b_in, "mul");
  const Tensor a = dense(a_in), b = dense(b_in);
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch_float(a.dtype(), "mul", [&](auto tag) {
    using T = decltype(tag);
    cpu::mul_forward(out.data<T>(), a.data<T>(), b.data<T>(), a.numel());
  });
  // backward: da += b * dy, db += a * dy
  return record("mul", out, {a_in, b_in}, [a, b](const Tensor& dy, GradSink& g) {
    dispatch_float(dy.dtype(), "mul backward", [&](auto tag) {
      using T = decltype(tag);
      Tensor da = g.grad(0), db = g.grad(1);
      cpu::mul_backward(da.defined() ? da.data<T>() : nullptr,
                        db.defined() ? db.data<T>() : nullptr, a.data<T>(), b.data<T>(),
                        dy.data<T>(), dy.numel());
    });
  });
}

// ---- scale: a (any) -> factor * a
// ----------------------------------------------------------------
Tensor scale(const Tensor& a_in, double factor) {
  check_defined(a_in, "scale", "input");
  const Tensor a = dense(a_in);
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch_float(a.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    cpu::scale_forward(out.data<T>(), a.data<T>(), T(factor), a.numel());
  });
  // backward: da += factor * dy
  return record("scale", out, {a_in}, [factor](const Tensor& dy, GradSink& g) {
    if (Tensor da = g.grad(0); da.defined())
      dispatch_float(dy.dtype(), "scale backward", [&](auto tag) {
        using T = decltype(tag);
        cpu::axpy(da.data<T>(), T(factor), dy.data<T>(), dy.numel());
      });
  });
}

}  // namespace chorus::tensor
