// dropout: x (any shape) -> same shape. Element i (row-major) is kept when
// uniform_at(key, i) >= p and then scaled by 1/(1-p). The mask is never stored: backward
// regenerates it from the key, which is also what makes checkpoint recomputation exact.
#include "chorus/tensor/random.h"
#include "cpu/simd.h"
#include "ops/op_util.h"

namespace chorus::tensor {
namespace {

// out[i] (+)= keep(i) ? scale * in[i] : 0 over i in [0, n).
template <class T>
void apply_mask(T* out, const T* in, int64_t n, double p, RngKey key, bool accumulate) {
  const T s = T(1.0 / (1.0 - p));
  const float threshold = static_cast<float>(p);
  parallel_for(n, 32, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const T v = uniform_at(key, static_cast<uint64_t>(i)) >= threshold ? s * in[i] : T(0);
      out[i] = accumulate ? out[i] + v : v;
    }
  });
}

}  // namespace

Tensor dropout(const Tensor& x_in, double p, RngKey key) {
  check_defined(x_in, "dropout", "input");
  CHORUS_ARG_CHECK(p >= 0.0 && p < 1.0, "dropout: p = ", p, " outside [0, 1)");
  if (p == 0.0) return x_in;
  const Tensor x = dense(x_in);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    apply_mask(out.data<T>(), x.data<T>(), x.numel(), p, key, false);
  });
  // backward: dx += mask * dy / (1 - p)
  return record("dropout", out, {x_in}, [p, key](const Tensor& dy, GradSink& g) {
    if (Tensor dx = g.grad(0); dx.defined())
      dispatch_float(dy.dtype(), "dropout backward", [&](auto tag) {
        using T = decltype(tag);
        apply_mask(dx.data<T>(), dy.data<T>(), dy.numel(), p, key, true);
      });
  });
}

}  // namespace chorus::tensor
