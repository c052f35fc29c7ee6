// gelu: x (any shape) -> same shape, tanh approximation; kernels in kernels/elementwise.cc.
#include "cpu/elementwise.h"
#include "ops/op_util.h"

namespace chorus::tensor {

Tensor gelu(const Tensor& x_in) {
  check_defined(x_in, "gelu", "input");
  const Tensor x = dense(x_in);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "gelu", [&](auto tag) {
    using T = decltype(tag);
    cpu::gelu_forward(out.data<T>(), x.data<T>(), x.numel());
  });
  // backward: dx += gelu'(x) * dy (x saved; gelu' recomputed from it)
  return record("gelu", out, {x_in}, [x](const Tensor& dy, GradSink& g) {
    if (Tensor dx = g.grad(0); dx.defined())
      dispatch_float(x.dtype(), "gelu backward", [&](auto tag) {
        using T = decltype(tag);
        cpu::gelu_backward(dx.data<T>(), x.data<T>(), dy.data<T>(), x.numel());
      });
  });
}

}  // namespace chorus::tensor
