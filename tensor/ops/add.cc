// add / sub (the residual connections): out = a +- b, all three the same shape.
#include "ops/op_util.h"

namespace chorus::tensor {
namespace {

Tensor add_or_sub(const Tensor& a_in, const Tensor& b_in, bool subtract) {
  const char* name = subtract ? "sub" : "add";
  check_same(a_in, b_in, name);
  check_float(a_in, name);
  Backend& be = backend_for(a_in.device());
  const Tensor a = dense(a_in), b = dense(b_in);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  if (subtract)
    be.sub(out, a, b);
  else
    be.add(out, a, b);
  // backward: da += dy, db += (subtract ? -dy : dy)
  return record(name, out, {a_in, b_in}, [subtract](const Tensor& dy, GradSink& g) {
    Backend& be = backend_for(dy.device());
    // A fresh buffer is assigned (a copy) instead of zeroed and accumulated.
    bool fresh = false;
    if (Tensor da = g.grad_for_write(0, &fresh); da.defined()) {
      if (fresh)
        be.copy(da, dy, /*accumulate=*/false);
      else
        be.axpy(da, 1.0, dy);
    }
    if (Tensor db = g.grad_for_write(1, &fresh); db.defined()) {
      const double s = subtract ? -1.0 : 1.0;
      if (fresh)
        be.scale(db, dy, s);
      else
        be.axpy(db, s, dy);
    }
  });
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return add_or_sub(a, b, false); }
Tensor sub(const Tensor& a, const Tensor& b) { return add_or_sub(a, b, true); }

}  // namespace chorus::tensor
