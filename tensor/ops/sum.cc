// sum / mean: x (any shape) -> () scalar. Accumulated in double.
#include "cpu/elementwise.h"
#include "ops/op_util.h"

namespace chorus::tensor {
namespace {

Tensor reduce_all(const Tensor& x_in, bool average) {
  const char* name = average ? "mean" : "sum";
  check_defined(x_in, name, "input");
  const Tensor x = dense(x_in);
  const int64_t n = x.numel();
  const double factor = average ? 1.0 / static_cast<double>(std::max<int64_t>(n, 1)) : 1.0;
  Tensor out = Tensor::empty({}, x.dtype());
  dispatch_float(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    *out.data<T>() = static_cast<T>(cpu::sum(x.data<T>(), n) * factor);
  });
  // backward: dx[i] += factor * dy (dy is a scalar)
  return record(name, out, {x_in}, [factor](const Tensor& dy, GradSink& g) {
    if (Tensor dx = g.grad(0); dx.defined())
      dispatch_float(dx.dtype(), "sum backward", [&](auto tag) {
        using T = decltype(tag);
        const T v = static_cast<T>(factor * double(*dy.data<T>()));
        T* d = dx.data<T>();
        for (int64_t i = 0, n = dx.numel(); i < n; ++i) d[i] += v;
      });
  });
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce_all(x, false); }
Tensor mean(const Tensor& x) { return reduce_all(x, true); }

}  // namespace chorus::tensor
