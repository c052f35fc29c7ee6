// add_bias: x (N, C) [any leading dims flattened to N] + bias (C) on every row -> (N, C).
// backward: dx += dy;  dbias += column sums of dy.
#include <cstring>

#include "cpu/elementwise.h"
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
  const Tensor x = dense(x_in), b = dense(b_in);
  const int64_t C = b.size(0), N = C == 0 ? 0 : x.numel() / C;
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "add_bias", [&](auto tag) {
    using T = decltype(tag);
    std::memcpy(out.data<T>(), x.data<T>(), x.nbytes());
    cpu::add_bias_rows(out.data<T>(), b.data<T>(), N, C);
  });
  return record("add_bias", out, {x_in, b_in}, [N, C](const Tensor& dy, GradSink& g) {
    dispatch_float(dy.dtype(), "add_bias backward", [&](auto tag) {
      using T = decltype(tag);
      bool fresh = false;
      if (Tensor dx = g.grad_for_write(0, &fresh); dx.defined()) {
        if (fresh)
          std::memcpy(dx.data<T>(), dy.data<T>(), dy.nbytes());
        else
          cpu::axpy(dx.data<T>(), T(1), dy.data<T>(), dy.numel());
      }
      if (Tensor db = g.grad_for_write(1, &fresh); db.defined())
        cpu::sum_rows(db.data<T>(), dy.data<T>(), N, C, fresh);
    });
  });
}

}  // namespace chorus::tensor
