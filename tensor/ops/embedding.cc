// embedding: idx (B, T) of i32/i64 [any shape], weight (V, C) -> out (B, T, C).
#include <cstring>

#include "ops/op_util.h"

namespace chorus::tensor {

Tensor embedding(const Tensor& idx_in, const Tensor& w_in) {
  check_defined(idx_in, "embedding", "indices");
  check_defined(w_in, "embedding", "weight");
  CHORUS_ARG_CHECK(w_in.dim() == 2, "embedding: weight must be (V, C), got ",
                   to_string(w_in.shape()));
  const Tensor idx = dense(idx_in), w = dense(w_in);
  const int64_t V = w.size(0), C = w.size(1), N = idx.numel();
  Shape out_shape = idx.shape();
  out_shape.push_back(C);
  Tensor out = Tensor::empty(out_shape, w.dtype());
  const size_t row_bytes = static_cast<size_t>(C) * dtype_size(w.dtype());
  dispatch_index(idx.dtype(), "embedding", [&](auto itag) {
    using I = decltype(itag);
    const I* ix = idx.data<I>();
    for (int64_t n = 0; n < N; ++n) {
      const int64_t r = static_cast<int64_t>(ix[n]);
      CHORUS_ARG_CHECK(r >= 0 && r < V, "embedding: index ", r, " outside [0, ", V, ")");
      std::memcpy(static_cast<char*>(out.data_ptr()) + n * row_bytes,
                  static_cast<const char*>(w.data_ptr()) + r * row_bytes, row_bytes);
    }
  });
  // backward: dweight[idx[n]] += dout[n] (rows of repeated tokens add up; done serially, it is
  // N * C adds)
  return record("embedding", out, {idx_in, w_in}, [idx, N, C](const Tensor& dy, GradSink& g) {
    Tensor dw = g.grad(1);
    if (!dw.defined()) return;
    dispatch_float(dy.dtype(), "embedding backward", [&](auto tag) {
      using T = decltype(tag);
      dispatch_index(idx.dtype(), "embedding backward", [&](auto itag) {
        using I = decltype(itag);
        const I* ix = idx.data<I>();
        const T* d = dy.data<T>();
        T* dwp = dw.data<T>();
        for (int64_t n = 0; n < N; ++n) {
          T* row = dwp + static_cast<int64_t>(ix[n]) * C;
          for (int64_t c = 0; c < C; ++c) row[c] += d[n * C + c];
        }
      });
    });
  });
}

}  // namespace chorus::tensor
