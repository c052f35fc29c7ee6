// causal_attention: q, k, v (B, NH, T, HS), any outer strides -> out (B, NH, T, HS) contiguous.
// causal_attention_qkv: qkv (B, T, 3, NH, HS) [c_attn's output] -> out (B, T, NH, HS) = (B, T, C).
// Both save their inputs (q/k/v as views, no copies) and the attention weights (B, NH, T, T);
// kernels in kernels/attention.cc. The qkv form is the GPT's: it reads q/k/v in place and
// writes the output and the qkv gradient in the layouts c_attn/c_proj use, so no transpose or
// reshape copies (and their backward copies) surround it.
#include "cpu/attention.h"
#include "ops/op_util.h"

namespace chorus::tensor {
namespace {

// The operand as the kernel reads it: innermost stride 1 (copied when not).
Tensor inner_dense(const Tensor& t) { return t.stride(3) == 1 ? t : dense(t); }

template <class T>
cpu::AttentionOperand<const T> operand(const Tensor& t) {
  return {t.data<T>(), {t.stride(0), t.stride(1), t.stride(2)}};
}
template <class T>
cpu::AttentionOperand<T> mut_operand(const Tensor& t) {
  return {t.data<T>(), {t.stride(0), t.stride(1), t.stride(2)}};
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
    cpu::attention_forward(mut_operand<T>(out), att.data<T>(), operand<T>(q), operand<T>(k),
                           operand<T>(v), B, NH, Tn, HS);
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
                    cpu::attention_backward(mut_operand<T>(d[0]), mut_operand<T>(d[1]),
                                            mut_operand<T>(d[2]), false, operand<T>(dy),
                                            att.data<T>(), operand<T>(q), operand<T>(k),
                                            operand<T>(v), B, NH, Tn, HS);
                  });
                });
}

Tensor causal_attention_qkv(const Tensor& qkv_in, int64_t heads) {
  check_defined(qkv_in, "causal_attention_qkv", "qkv");
  CHORUS_ARG_CHECK(qkv_in.dim() == 3 && heads > 0 && qkv_in.size(2) % (3 * heads) == 0,
                   "causal_attention_qkv: qkv must be (B, T, 3 * heads * HS), got ",
                   to_string(qkv_in.shape()), " with ", heads, " heads");
  const int64_t B = qkv_in.size(0), Tn = qkv_in.size(1), C = qkv_in.size(2) / 3, HS = C / heads;
  const Tensor qkv = dense(qkv_in);
  Tensor out = Tensor::empty({B, Tn, C}, qkv.dtype());
  Tensor att = Tensor::empty({B, heads, Tn, Tn}, qkv.dtype());
  // (B, T, 3, NH, HS): part i of (b, h) starts at b*T*3C + i*C + h*HS, rows 3C apart.
  const cpu::AttentionStrides in_s{Tn * 3 * C, HS, 3 * C}, out_s{Tn * C, HS, C};
  dispatch_float(qkv.dtype(), "causal_attention_qkv", [&](auto tag) {
    using T = decltype(tag);
    const T* base = qkv.data<T>();
    cpu::attention_forward<T>({out.data<T>(), out_s}, att.data<T>(), {base, in_s}, {base + C, in_s},
                              {base + 2 * C, in_s}, B, heads, Tn, HS);
  });
  // backward: dqkv (B, T, 3C) gets dq | dk | dv in place (assigned when the buffer is fresh).
  return record("causal_attention_qkv", out, {qkv_in},
                [qkv, att, B, heads, Tn, C, HS, in_s, out_s](const Tensor& dy, GradSink& g) {
                  bool fresh = false;
                  Tensor dqkv = g.grad_for_write(0, &fresh);
                  if (!dqkv.defined()) return;
                  dispatch_float(dy.dtype(), "causal_attention_qkv backward", [&](auto tag) {
                    using T = decltype(tag);
                    const T* base = qkv.data<T>();
                    T* dbase = dqkv.data<T>();
                    cpu::attention_backward<T>({dbase, in_s}, {dbase + C, in_s},
                                               {dbase + 2 * C, in_s}, fresh, {dy.data<T>(), out_s},
                                               att.data<T>(), {base, in_s}, {base + C, in_s},
                                               {base + 2 * C, in_s}, B, heads, Tn, HS);
                  });
                });
}

}  // namespace chorus::tensor
