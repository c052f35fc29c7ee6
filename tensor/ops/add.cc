// add / sub (the residual connections): out = a +- b, all three the same shape.
#include <cstring>

#include "cpu/elementwise.h"
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
      cpu::sub_forward(out.data<T>(), a.data<T>(), b.data<T>(), a.numel());
    else
      cpu::add_forward(out.data<T>(), a.data<T>(), b.data<T>(), a.numel());
  });
  // backward: da += dy, db += (subtract ? -dy : dy)
  return record(name, out, {a_in, b_in}, [subtract](const Tensor& dy, GradSink& g) {
    dispatch_float(dy.dtype(), "add backward", [&](auto tag) {
      using T = decltype(tag);
      // A fresh buffer is assigned (a copy) instead of zeroed and accumulated.
      bool fresh = false;
      if (Tensor da = g.grad_for_write(0, &fresh); da.defined()) {
        if (fresh)
          std::memcpy(da.data<T>(), dy.data<T>(), dy.nbytes());
        else
          cpu::axpy(da.data<T>(), T(1), dy.data<T>(), dy.numel());
      }
      if (Tensor db = g.grad_for_write(1, &fresh); db.defined()) {
        const T s = T(subtract ? -1 : 1);
        if (fresh)
          cpu::scale_forward(db.data<T>(), dy.data<T>(), s, dy.numel());
        else
          cpu::axpy(db.data<T>(), s, dy.data<T>(), dy.numel());
      }
    });
  });
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return add_or_sub(a, b, false); }
Tensor sub(const Tensor& a, const Tensor& b) { return add_or_sub(a, b, true); }

}  // namespace chorus::tensor
