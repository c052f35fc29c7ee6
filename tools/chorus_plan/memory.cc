#include "memory.h"

#include <algorithm>

namespace chorus::plan {

double micro_batch_activations(const Setup& s, const MeshChoice& m, int64_t blocks, bool last,
                               bool checkpointed, int64_t first_block) {
  const double b = double(m.micro_batch_size), T = double(s.model.context),
               h = double(s.model.width), a = double(s.model.heads), V = double(s.model.vocab),
               t = double(m.tp);
  const double sbh = T * b * h;
  // An MoE block trades the MLP's saved tensors for, per expert assignment (active_experts() per
  // token), its gathered input row, c_fc's and gelu's outputs and the expert's output, and per
  // token the router's logits and probabilities (f32).
  const double k = s.model.active_experts(), E = double(s.model.experts), Tb = T * b;
  double layer = 0, moe_layer = 0, head = 0, kept = 0, head_saved = 0;
  if (s.dtype == "f32") {
    // f32 elements autograd keeps per block: ln_1's input and output, ln_2's input and output
    // (4 sbh, whole on every tp rank), q k v, the attention output, c_fc's output and gelu's
    // (12 sbh / tp), the attention weights (a s^2 b / tp) and the LayerNorms' mean and rstd.
    layer = 4 * (sbh * (4 + 12 / t) + a * T * T * b / t + 4 * T * b);
    moe_layer = layer - 4 * 8 * sbh / t + 4 * (10 * k * sbh + 2 * Tb * E);
    // ln_f's input and output, the logits, their softmax and their gradient (V / tp each).
    head = 4 * (2 * sbh + 3 * T * b * V / t);
    // While a checkpointed block is recomputed the head's saved tensors (ln_f's output, the
    // logits and their softmax) are still held (they go with the step's graph); the logits'
    // gradient is gone.
    head_saved = 4 * (sbh + 2 * T * b * V / t);
    kept = 4 * sbh;  // a checkpointed block keeps its input
  } else {
    // Korthikanti et al. 2022, eq. 2 without sequence parallelism: s b h (10 + 24/t + 5 a s/(h t))
    // bytes per layer; the head's logits in f32 (logits, softmax, gradient).
    layer = sbh * (10 + 24 / t + 5 * a * T / (h * t));
    // The MLP's 16/t + 3 (its input, gelu's input and c_proj's, the dropout mask) per token.
    moe_layer = layer - sbh * (16 / t + 3) + 20 * k * sbh + 8 * Tb * E;
    head = 2 * 2 * sbh + 4 * 3 * T * b * V / t;
    head_saved = 2 * sbh + 4 * 2 * T * b * V / t;
    kept = 2 * sbh;
  }
  double all = 0, largest = 0;
  for (int64_t i = first_block; i < first_block + blocks; ++i) {
    const double one = s.model.moe_block(i) ? moe_layer : layer;
    all += one;
    largest = std::max(largest, one);
  }
  // Checkpointed: every block's input, plus one block's activations while it is recomputed.
  if (checkpointed) return double(blocks) * kept + largest + (last ? head_saved : 0);
  return all + (last ? head : 0);
}

double live_micro_batches(const Setup& s, const MeshChoice& m, int stage) {
  const int p = m.pp, M = m.micro_batches;
  if (p == 1) return 1;
  if (s.schedule == "gpipe") return M;
  const double one_f_one_b = std::min(M, p - stage);
  if (s.schedule == "interleaved")  // Korthikanti et al. 2022, section 4.2.3
    return std::min(double(M), one_f_one_b * (1 + double(p - 1) / (p * m.chunks)));
  return one_f_one_b;
}

MemoryEstimate estimate_stage_memory(const Setup& s, const MeshChoice& m, int stage) {
  const double pb = s.param_dtype == "bf16" ? 2 : 4;  // parameter and gradient bytes
  const double N = m.dp;
  const int64_t blocks = stage_blocks(s.model, m.pp, stage);
  const int64_t first_block = stage_first_block(s.model, m.pp, stage);
  const bool first = stage == 0, last = stage == m.pp - 1;
  const RankParameters rp =
      rank_parameters(s.model, m.tp, blocks, first, last, m.pp > 1, m.ep, first_block);
  // The experts' states shard over the dp / ep ranks that hold the same experts.
  const double P = double(rp.trained), X = double(rp.experts), NX = N / m.ep;
  MemoryEstimate e;
  e.stage = stage;
  e.parameters = (P + X) * pb + double(rp.head_copy) * pb;
  // With DDP on more than one rank a mixture's experts step with an AdamW of their own, whose
  // gradients live from backward to the step only (zeroed to none after it): neither the states
  // held between steps nor the peak at backward's start count them.
  const bool transient_expert_grads = s.zero == 0 && m.dp > 1;
  e.gradients = (P + (transient_expert_grads ? 0 : X)) * pb;
  e.optimizer = 2 * 4 * (P + X);  // AdamW's two f32 moments
  e.master = pb < 4 ? 4 * (P + X) : 0;
  if (s.zero >= 1) {
    e.optimizer = 2 * 4 * (P / N + X / NX);
    e.master = pb < 4 ? 4 * (P / N + X / NX) : 0;
  }
  if (s.zero == 2) {
    e.gradients = (P / N + X / NX) * pb;
    // At most two staging buckets in flight, never more than the whole gradient.
    e.comm_buffers += std::min(2 * double(s.bucket_bytes), P * pb);
  }
  if (s.zero == 3) {
    e.gradients /= N;
    e.parameters /= N;
    // Gathered: the root unit (embeddings, final LayerNorm) for the whole step, the block in
    // use and the one prefetched, and the gradients of the block in flight.
    const RankParameters root = rank_parameters(s.model, m.tp, 0, true, true, false);
    const double block = double(rank_parameters(s.model, m.tp, 1, false, false, false).trained);
    e.comm_buffers += (double(root.trained) + 3 * block) * pb;
  }
  const double live = live_micro_batches(s, m, stage);
  e.activations_full = live * micro_batch_activations(s, m, blocks, last, false, first_block);
  e.activations_checkpointed =
      live * micro_batch_activations(s, m, blocks, last, true, first_block);
  e.activations = s.checkpoint_activations ? e.activations_checkpointed : e.activations_full;
  if (m.pp > 1) {  // a received activation and a received gradient: b s h f32 each
    const double bsh = double(m.micro_batch_size) * double(s.model.context) * double(s.model.width);
    e.comm_buffers += 2 * 4 * bsh;
    // The tied table's gradient (V/tp x h, f32) crosses from the last stage to the first per
    // micro-batch (parallel/pipeline/engine.cc): the first stage keeps a receive buffer per live
    // micro-batch and, in the embedding's backward, the table's own gradient and their sum; the
    // last stage the gradient it is sending.
    const double table = 4 * double((s.model.vocab + m.tp - 1) / m.tp * s.model.width);
    if (first) {
      e.comm_buffers += (live + 2) * table;
      // Per live micro-batch, 2.5 b s h f32 more (the embeddings' outputs and the activation
      // being sent; measured on chorus's engine, docs/PLANNING.md).
      for (double* a : {&e.activations, &e.activations_full, &e.activations_checkpointed})
        *a += live * 2.5 * 4 * bsh;
    }
    if (last && !first) e.comm_buffers += table;
  }
  e.peak = e.parameters + e.gradients + e.optimizer + e.master + e.activations + e.comm_buffers;
  return e;
}

MemoryEstimate estimate_memory(const Setup& s, const MeshChoice& m) {
  MemoryEstimate best = estimate_stage_memory(s, m, 0);
  for (int stage = 1; stage < m.pp; ++stage)
    if (MemoryEstimate e = estimate_stage_memory(s, m, stage); e.peak > best.peak) best = e;
  return best;
}

}  // namespace chorus::plan
