// index_add_rows: base (N, C), idx (M) of i32/i64, src (M, C) -> out (N, C), base with src[m]
// added to row idx[m], m in order.
#include "ops/op_util.h"

namespace chorus::tensor {

Tensor index_add_rows(const Tensor& base_in, const Tensor& idx_in, const Tensor& src_in) {
  check_defined(base_in, "index_add_rows", "base");
  check_defined(idx_in, "index_add_rows", "indices");
  check_defined(src_in, "index_add_rows", "source");
  check_float(base_in, "index_add_rows");
  CHORUS_ARG_CHECK(base_in.dim() == 2, "index_add_rows: base must be (N, C), got ",
                   to_string(base_in.shape()));
  CHORUS_ARG_CHECK(idx_in.dim() == 1, "index_add_rows: indices must be (M), got ",
                   to_string(idx_in.shape()));
  CHORUS_ARG_CHECK(idx_in.dtype() == DataType::kI32 || idx_in.dtype() == DataType::kI64,
                   "index_add_rows: index dtype ", to_string(idx_in.dtype()),
                   " not supported (i32 or i64)");
  CHORUS_ARG_CHECK(src_in.shape() == Shape({idx_in.numel(), base_in.size(1)}),
                   "index_add_rows: source must be (", idx_in.numel(), ", ", base_in.size(1),
                   "), got ", to_string(src_in.shape()));
  CHORUS_ARG_CHECK(src_in.dtype() == base_in.dtype(), "index_add_rows: dtypes ",
                   to_string(base_in.dtype()), " vs ", to_string(src_in.dtype()));
  Backend& be =
      backend_of("index_add_rows", {{base_in, "base"}, {idx_in, "indices"}, {src_in, "source"}});
  const Tensor idx = dense(idx_in), src = dense(src_in);
  // The scatter kernel does not check its indices: check them here (on the host).
  const int64_t N = base_in.size(0);
  for (const double r : idx.to_vector())
    CHORUS_ARG_CHECK(r >= 0 && r < static_cast<double>(N), "index_add_rows: index ",
                     static_cast<int64_t>(r), " outside [0, ", N, ")");
  Tensor out = Tensor::empty(base_in.shape(), base_in.dtype(), base_in.device());
  be.copy(out, base_in, /*accumulate=*/false);
  be.embedding_backward(out, idx, src);  // out[idx[m]] += src[m], m in order
  // backward: dbase += dy; dsrc[m] += dy[idx[m]]
  return record("index_add_rows", out, {base_in, idx_in, src_in},
                [idx](const Tensor& dy, GradSink& g) {
                  Backend& b = backend_for(dy.device());
                  bool fresh = false;
                  if (Tensor db = g.grad_for_write(0, &fresh); db.defined()) b.copy(db, dy, !fresh);
                  if (Tensor ds = g.grad_for_write(2, &fresh); ds.defined()) {
                    if (fresh) {
                      b.embedding_forward(ds, idx, dy);
                    } else {
                      Tensor rows = Tensor::empty(ds.shape(), ds.dtype(), ds.device());
                      b.embedding_forward(rows, idx, dy);
                      b.copy(ds, rows, /*accumulate=*/true);
                    }
                  }
                });
}

}  // namespace chorus::tensor
