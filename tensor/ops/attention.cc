// causal_attention: q, k, v (B, NH, T, HS), any outer strides -> out (B, NH, T, HS) contiguous.
// Saves q, k, v (as views, no copies) and the attention weights (B, NH, T, T).
#include "kernels/attention.h"
#include "ops/op_util.h"

namespace chorus::tensor {
namespace {

// The operand as the kernel reads it: innermost stride 1 (copied when not).
Tensor inner_dense(const Tensor& t) { return t.stride(3) == 1 ? t : dense(t); }
kernels::AttentionStrides strides_of(const Tensor& t) {
  return {t.stride(0), t.stride(1), t.stride(2)};
}

}  // namespace

Tensor causal_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in) {
  check_defined(q_in, "causal_attention", "q");
  check_defined(k_in, "causal_attention", "k");
  check_defined(v_in, "causal_attention", "v");
  CHORUS_ARG_CHECK(q_in.dim() == 4, "causal_attention: q must be (B, NH, T, HS), got ",
                   to_string(q_in.shape()));
  check_same(q_in, k_in, "causal_attention");
  check_same(q_in, v_in, "causal_attention");
  const int64_t B = q_in.size(0), NH = q_in.size(1), Tn = q_in.size(2), HS = q_in.size(3);
  const Tensor q = inner_dense(q_in), k = inner_dense(k_in), v = inner_dense(v_in);
  Tensor out = Tensor::empty({B, NH, Tn, HS}, q.dtype());
  Tensor att = Tensor::empty({B, NH, Tn, Tn}, q.dtype());
  dispatch_float(q.dtype(), "causal_attention", [&](auto tag) {
    using T = decltype(tag);
    kernels::attention_forward(out.data<T>(), att.data<T>(), q.data<T>(), strides_of(q),
                               k.data<T>(), strides_of(k), v.data<T>(), strides_of(v), B, NH, Tn,
                               HS);
  });
  // backward: dq, dk, dv += (see kernels/attention.cc); the kernel needs all three buffers, so
  // any that are not wanted go to a scratch tensor.
  return record("causal_attention", out, {q_in, k_in, v_in},
                [q, k, v, att, B, NH, Tn, HS](const Tensor& dy, GradSink& g) {
    dispatch_float(dy.dtype(), "causal_attention backward", [&](auto tag) {
      using T = decltype(tag);
      Tensor d[3];
      for (size_t i = 0; i < 3; ++i) {
        d[i] = g.grad(i);
        if (!d[i].defined()) d[i] = Tensor::zeros({B, NH, Tn, HS}, dy.dtype());
      }
      kernels::attention_backward(d[0].data<T>(), d[1].data<T>(), d[2].data<T>(), dy.data<T>(),
                                  att.data<T>(), q.data<T>(), strides_of(q), k.data<T>(),
                                  strides_of(k), v.data<T>(), strides_of(v), B, NH, Tn, HS);
    });
  });
}

}  // namespace chorus::tensor
