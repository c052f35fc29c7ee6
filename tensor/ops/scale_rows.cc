// scale_rows: x (M, C), s (M) -> out (M, C), row m of x times s[m].
#include "ops/op_util.h"

namespace chorus::tensor {

Tensor scale_rows(const Tensor& x_in, const Tensor& s_in) {
  check_defined(x_in, "scale_rows", "input");
  check_defined(s_in, "scale_rows", "scales");
  check_float(x_in, "scale_rows");
  CHORUS_ARG_CHECK(x_in.dim() == 2, "scale_rows: input must be (M, C), got ",
                   to_string(x_in.shape()));
  CHORUS_ARG_CHECK(s_in.shape() == Shape({x_in.size(0)}), "scale_rows: scales must be (",
                   x_in.size(0), "), got ", to_string(s_in.shape()));
  CHORUS_ARG_CHECK(s_in.dtype() == x_in.dtype(), "scale_rows: dtypes ", to_string(x_in.dtype()),
                   " vs ", to_string(s_in.dtype()));
  Backend& be = backend_of("scale_rows", {{x_in, "input"}, {s_in, "scales"}});
  const Tensor x = dense(x_in), s = dense(s_in);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  be.scale_rows(out, x, s);
  // backward: dx[m] += dy[m] * s[m]; ds[m] += dy[m] . x[m]
  return record("scale_rows", out, {x_in, s_in}, [x, s](const Tensor& dy, GradSink& g) {
    backend_for(dy.device()).scale_rows_backward(g.grad(0), g.grad(1), x, s, dy);
  });
}

}  // namespace chorus::tensor
