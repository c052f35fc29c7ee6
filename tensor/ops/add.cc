// add / sub (the residual connections): out = a +- b, all three the same shape.
#include "kernels/elementwise.h"
#include "ops/op_util.h"

namespace chorus::tensor {
namespace {

Tensor add_or_sub(const Tensor& a_in, const Tensor& b_in, bool subtract) {
  const char* name = subtract ? "sub" : "add";
  check_same(a_in, b_in, name);
  const Tensor a = dense(a_in), b = dense(b_in);
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch_float(a.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    if (subtract)
      kernels::sub_forward(out.data<T>(), a.data<T>(), b.data<T>(), a.numel());
    else
      kernels::add_forward(out.data<T>(), a.data<T>(), b.data<T>(), a.numel());
  });
  // backward: da += dy, db += (subtract ? -dy : dy)
  return record(name, out, {a_in, b_in}, [subtract](const Tensor& dy, GradSink& g) {
    dispatch_float(dy.dtype(), "add backward", [&](auto tag) {
      using T = decltype(tag);
      if (Tensor da = g.grad(0); da.defined()) kernels::axpy(da.data<T>(), T(1), dy.data<T>(), dy.numel());
      if (Tensor db = g.grad(1); db.defined())
        kernels::axpy(db.data<T>(), T(subtract ? -1 : 1), dy.data<T>(), dy.numel());
    });
  });
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return add_or_sub(a, b, false); }
Tensor sub(const Tensor& a, const Tensor& b) { return add_or_sub(a, b, true); }

}  // namespace chorus::tensor
