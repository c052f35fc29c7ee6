// softmax over the last dim: x (N, V) [leading dims flattened] -> y (N, V). Saves y.
#include "cpu/softmax.h"
#include "ops/op_util.h"

namespace chorus::tensor {

Tensor softmax(const Tensor& x_in) {
  check_defined(x_in, "softmax", "input");
  const Tensor x = dense(x_in);
  const int64_t V = x.size(-1), N = x.numel() / std::max<int64_t>(V, 1);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    cpu::softmax_forward(y.data<T>(), x.data<T>(), N, V);
  });
  // backward: dx += y * (dy - sum(dy * y)), row by row. The node saves y: hold it detached so
  // the saved tensor does not keep its own node alive (a cycle).
  const Tensor saved = y.detach();
  return record("softmax", y, {x_in}, [saved, N, V](const Tensor& dy, GradSink& g) {
    if (Tensor dx = g.grad(0); dx.defined())
      dispatch_float(dy.dtype(), "softmax backward", [&](auto tag) {
        using T = decltype(tag);
        cpu::softmax_backward(dx.data<T>(), saved.data<T>(), dy.data<T>(), N, V);
      });
  });
}

}  // namespace chorus::tensor
