// matmul: a (..., M, K) @ b (K, N) -> (..., M, N), or batched a (Bt, M, K) @ b (Bt, K, N).
#include "ops/gemm_op.h"

namespace chorus::tensor {

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  check_defined(a_in, "matmul", "a");
  check_defined(b_in, "matmul", "b");
  CHORUS_ARG_CHECK(a_in.dtype() == b_in.dtype(), "matmul: dtypes ", to_string(a_in.dtype()), " vs ",
                   to_string(b_in.dtype()));
  CHORUS_ARG_CHECK(a_in.dim() >= 2 && (b_in.dim() == 2 || b_in.dim() == 3), "matmul: a ",
                   to_string(a_in.shape()), " b ", to_string(b_in.shape()));
  const bool batched = b_in.dim() == 3;
  const int64_t K = a_in.size(-1), N = b_in.size(-1);
  CHORUS_ARG_CHECK(b_in.size(-2) == K, "matmul: inner dims ", to_string(a_in.shape()), " @ ",
                   to_string(b_in.shape()));
  if (batched)
    CHORUS_ARG_CHECK(a_in.dim() == 3 && a_in.size(0) == b_in.size(0),
                     "matmul: batched needs a (Bt, M, K), b (Bt, K, N), got ",
                     to_string(a_in.shape()), " @ ", to_string(b_in.shape()));
  // Per batch: a_i (M, K) @ b_i (K, N); the unbatched form is one batch of M = all rows of a.
  const int64_t Bt = batched ? a_in.size(0) : 1;
  const int64_t M = batched ? a_in.size(1) : a_in.numel() / K;
  Shape out_shape = a_in.shape();
  out_shape.back() = N;
  Tensor out = Tensor::empty(out_shape, a_in.dtype());

  const DataType lowp = a_in.dtype() == DataType::kF32 ? autocast_dtype() : DataType::kF32;
  if (lowp != DataType::kF32) {
    const Tensor a16 = to_lowp(a_in, lowp), b16 = to_lowp(b_in, lowp);
    for (int64_t i = 0; i < Bt; ++i)
      mm_lowp(lowp, false, false, M, N, K,
              a16.narrow(0, batched ? i : 0, batched ? 1 : a16.size(0)), K,
              b16.narrow(0, batched ? i : 0, batched ? 1 : b16.size(0)), N,
              out.data<float>() + i * M * N, false);
    return record("matmul", out, {a_in, b_in},
                  [a16, b16, Bt, M, N, K, batched, lowp](const Tensor& dy, GradSink& g) {
                    const Tensor dy16 = to_lowp(dy, lowp);
                    Tensor da = g.grad(0), db = g.grad(1);
                    for (int64_t i = 0; i < Bt; ++i) {
                      auto part = [&](const Tensor& t) { return batched ? t.narrow(0, i, 1) : t; };
                      // da_i (M, K) += dy_i (M, N) @ b_i^T
                      if (da.defined())
                        mm_lowp(lowp, false, true, M, K, N, part(dy16), N, part(b16), N,
                                da.data<float>() + i * M * K, true);
                      // db_i (K, N) += a_i^T (K, M) @ dy_i
                      if (db.defined())
                        mm_lowp(lowp, true, false, K, N, M, part(a16), K, part(dy16), N,
                                db.data<float>() + (batched ? i * K * N : 0), true);
                    }
                  });
  }

  const Tensor a = dense(a_in), b = dense(b_in);
  dispatch_float(a.dtype(), "matmul", [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < Bt; ++i)
      mm<T>(false, false, M, N, K, a.data<T>() + i * M * K, K, b.data<T>() + i * K * N, N,
            out.data<T>() + i * M * N, false);
  });
  return record("matmul", out, {a_in, b_in},
                [a, b, Bt, M, N, K, batched](const Tensor& dy, GradSink& g) {
                  dispatch_float(dy.dtype(), "matmul backward", [&](auto tag) {
                    using T = decltype(tag);
                    Tensor da = g.grad(0), db = g.grad(1);
                    for (int64_t i = 0; i < Bt; ++i) {
                      const T* dyi = dy.data<T>() + i * M * N;
                      // da_i (M, K) += dy_i (M, N) @ b_i^T (N, K)
                      if (da.defined())
                        mm<T>(false, true, M, K, N, dyi, N, b.data<T>() + i * K * N, N,
                              da.data<T>() + i * M * K, true);
                      // db_i (K, N) += a_i^T (K, M) @ dy_i (M, N)
                      if (db.defined())
                        mm<T>(true, false, K, N, M, a.data<T>() + i * M * K, K, dyi, N,
                              db.data<T>() + (batched ? i * K * N : 0), true);
                    }
                  });
                });
}

}  // namespace chorus::tensor
