// embedding: idx (B, T) of i32/i64 [any shape], weight (V, C) -> out (B, T, C).
#include "ops/op_util.h"

namespace chorus::tensor {

Tensor embedding(const Tensor& idx_in, const Tensor& w_in) {
  check_defined(idx_in, "embedding", "indices");
  check_defined(w_in, "embedding", "weight");
  CHORUS_ARG_CHECK(w_in.dim() == 2, "embedding: weight must be (V, C), got ",
                   to_string(w_in.shape()));
  CHORUS_ARG_CHECK(idx_in.dtype() == DataType::kI32 || idx_in.dtype() == DataType::kI64,
                   "embedding: index dtype ", to_string(idx_in.dtype()),
                   " not supported (i32 or i64)");
  Backend& be = backend_of("embedding", {{idx_in, "indices"}, {w_in, "weight"}});
  const Tensor idx = dense(idx_in), w = dense(w_in);
  Shape out_shape = idx.shape();
  out_shape.push_back(w.size(1));
  Tensor out = Tensor::empty(out_shape, w.dtype(), w.device());
  be.embedding_forward(out, idx, w);
  // backward: dweight[idx[n]] += dout[n]
  return record("embedding", out, {idx_in, w_in}, [idx](const Tensor& dy, GradSink& g) {
    Tensor dw = g.grad(1);
    if (!dw.defined()) return;
    check_float(dw, "embedding backward");
    backend_for(dy.device()).embedding_backward(dw, idx, dy);
  });
}

}  // namespace chorus::tensor
