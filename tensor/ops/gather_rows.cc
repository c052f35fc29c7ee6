// gather_rows: x (N, C), idx (M) of i32/i64 -> out (M, C), out[m] = x[idx[m]].
#include "ops/op_util.h"

namespace chorus::tensor {

Tensor gather_rows(const Tensor& x_in, const Tensor& idx_in) {
  check_defined(x_in, "gather_rows", "input");
  check_defined(idx_in, "gather_rows", "indices");
  check_float(x_in, "gather_rows");
  CHORUS_ARG_CHECK(x_in.dim() == 2, "gather_rows: input must be (N, C), got ",
                   to_string(x_in.shape()));
  CHORUS_ARG_CHECK(idx_in.dim() == 1, "gather_rows: indices must be (M), got ",
                   to_string(idx_in.shape()));
  CHORUS_ARG_CHECK(idx_in.dtype() == DataType::kI32 || idx_in.dtype() == DataType::kI64,
                   "gather_rows: index dtype ", to_string(idx_in.dtype()),
                   " not supported (i32 or i64)");
  Backend& be = backend_of("gather_rows", {{x_in, "input"}, {idx_in, "indices"}});
  const Tensor x = dense(x_in), idx = dense(idx_in);
  Tensor out = Tensor::empty({idx.numel(), x.size(1)}, x.dtype(), x.device());
  // The embedding kernels are this gather and its scatter-add (an index outside [0, N) is
  // InvalidArgument from the forward kernel).
  be.embedding_forward(out, idx, x);
  // backward: dx[idx[m]] += dy[m], m in order (repeated indices add up in that order)
  return record("gather_rows", out, {x_in, idx_in}, [idx](const Tensor& dy, GradSink& g) {
    if (Tensor dx = g.grad(0); dx.defined())
      backend_for(dy.device()).embedding_backward(dx, idx, dy);
  });
}

}  // namespace chorus::tensor
