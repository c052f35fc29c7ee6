// causal_attention: q, k, v (B, NH, T, HS), any outer strides -> out (B, NH, T, HS) contiguous.
// causal_attention_qkv: qkv (B, T, 3, NH, HS) [c_attn's output] -> out (B, T, NH, HS) = (B, T, C).
// Both save their inputs (q/k/v as views, no copies) and, for backward, either the attention
// weights (B, NH, T, T) [cpu/attention.cc on the CPU; batched GEMMs on CUDA] or, where the
// device's backend has fused kernels and fused_attention() is on, the output and the logsumexp of
// each row (B, NH, T) [cuda/flash_attention.cu: the weights are recomputed tile by tile]. The qkv
// form is the GPT's: it reads q/k/v in place and writes the output and the qkv gradient in the
// layouts c_attn/c_proj use, so no transpose or reshape copies (and their backward copies) surround
// it.
#include "ops/op_util.h"

namespace chorus::tensor {
namespace {

// The operand as the kernel reads it: innermost stride 1 (copied when not).
Tensor inner_dense(const Tensor& t) { return t.stride(3) == 1 ? t : dense(t); }

// Part `part` (0 q, 1 k, 2 v) of a (B, T, 3C) qkv buffer as a (B, NH, T, HS) view: part i of
// (b, h) starts at b*T*3C + i*C + h*HS, rows 3C apart.
Tensor qkv_part(const Tensor& qkv, int64_t part, int64_t heads) {
  const int64_t B = qkv.size(0), Tn = qkv.size(1), C = qkv.size(2) / 3, HS = C / heads;
  return raw_view(qkv, {B, heads, Tn, HS}, {Tn * 3 * C, HS, 3 * C, 1}, qkv.offset() + part * C);
}

// A (B, T, C) buffer as (B, NH, T, HS), heads side by side.
Tensor heads_view(const Tensor& x, int64_t heads) {
  const int64_t B = x.size(0), Tn = x.size(1), C = x.size(2), HS = C / heads;
  return raw_view(x, {B, heads, Tn, HS}, {Tn * C, HS, C, 1}, x.offset());
}

// What backward needs: the weights, or (fused) the output and the rows' logsumexp.
struct Saved {
  Tensor att;       // (B, NH, T, T); undefined on the fused path
  Tensor out, lse;  // the fused path's: out as a (B, NH, T, HS) view, cut from the graph
};

// out (a (B, NH, T, HS) view of `out_buffer`, made by `view`) = attention of q, k, v.
template <class View>
Saved attend(const Tensor& out_buffer, const View& view, const Tensor& q, const Tensor& k,
             const Tensor& v) {
  const int64_t B = q.size(0), NH = q.size(1), Tn = q.size(2), HS = q.size(3);
  const Device dev = q.device();
  Backend& backend = backend_for(dev);
  Saved saved;
  if (fused_attention() && backend.has_fused_attention(q.dtype(), HS)) {
    // Detached: the node saving the output must not keep itself alive (a cycle).
    saved.out = view(out_buffer.detach());
    saved.lse = Tensor::empty({B, NH, Tn}, q.dtype(), dev);
    backend.fused_attention_forward(saved.out, saved.lse, q, k, v);
  } else {
    saved.att = Tensor::empty({B, NH, Tn, Tn}, q.dtype(), dev);
    backend.attention_forward(view(out_buffer), saved.att, q, k, v);
  }
  return saved;
}

void attend_backward(const Saved& saved, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                     bool assign, const Tensor& dy, const Tensor& q, const Tensor& k,
                     const Tensor& v) {
  Backend& backend = backend_for(dy.device());
  if (saved.att.defined())
    backend.attention_backward(dq, dk, dv, assign, dy, saved.att, q, k, v);
  else
    backend.fused_attention_backward(dq, dk, dv, assign, dy, saved.out, saved.lse, q, k, v);
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
  check_float(q_in, "causal_attention");
  const int64_t B = q_in.size(0), NH = q_in.size(1), Tn = q_in.size(2), HS = q_in.size(3);
  const Tensor q = inner_dense(q_in), k = inner_dense(k_in), v = inner_dense(v_in);
  Tensor out = Tensor::empty({B, NH, Tn, HS}, q.dtype(), q.device());
  const Saved saved = attend(
      out, [](const Tensor& t) { return t; }, q, k, v);
  // backward: dq, dk, dv += (see cpu/attention.cc); the kernels need all three buffers, so any
  // that are not wanted go to a scratch tensor.
  return record("causal_attention", out, {q_in, k_in, v_in},
                [q, k, v, saved](const Tensor& dy, GradSink& g) {
                  Tensor d[3];
                  for (size_t i = 0; i < 3; ++i) {
                    d[i] = g.grad(i);
                    if (!d[i].defined()) d[i] = Tensor::zeros(q.shape(), dy.dtype(), dy.device());
                  }
                  attend_backward(saved, d[0], d[1], d[2], false, dy, q, k, v);
                });
}

Tensor causal_attention_qkv(const Tensor& qkv_in, int64_t heads) {
  check_defined(qkv_in, "causal_attention_qkv", "qkv");
  CHORUS_ARG_CHECK(qkv_in.dim() == 3 && heads > 0 && qkv_in.size(2) % (3 * heads) == 0,
                   "causal_attention_qkv: qkv must be (B, T, 3 * heads * HS), got ",
                   to_string(qkv_in.shape()), " with ", heads, " heads");
  check_float(qkv_in, "causal_attention_qkv");
  const int64_t B = qkv_in.size(0), Tn = qkv_in.size(1), C = qkv_in.size(2) / 3;
  const Tensor qkv = dense(qkv_in);
  Tensor out = Tensor::empty({B, Tn, C}, qkv.dtype(), qkv.device());
  const Saved saved = attend(
      out, [heads](const Tensor& t) { return heads_view(t, heads); }, qkv_part(qkv, 0, heads),
      qkv_part(qkv, 1, heads), qkv_part(qkv, 2, heads));
  // backward: dqkv (B, T, 3C) gets dq | dk | dv in place (assigned when the buffer is fresh).
  return record(
      "causal_attention_qkv", out, {qkv_in}, [qkv, saved, heads](const Tensor& dy, GradSink& g) {
        bool fresh = false;
        Tensor dqkv = g.grad_for_write(0, &fresh);
        if (!dqkv.defined()) return;
        attend_backward(saved, qkv_part(dqkv, 0, heads), qkv_part(dqkv, 1, heads),
                        qkv_part(dqkv, 2, heads), fresh, heads_view(dy, heads),
                        qkv_part(qkv, 0, heads), qkv_part(qkv, 1, heads), qkv_part(qkv, 2, heads));
      });
}

}  // namespace chorus::tensor
