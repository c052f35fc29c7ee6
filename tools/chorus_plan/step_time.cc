#include "step_time.h"

#include <algorithm>
#include <cmath>

#include "collectives.h"

namespace chorus::plan {

double expert_imbalance(double assignments, int ep, int64_t experts) {
  if (ep <= 1 || assignments <= 0 || experts <= 0) return 0;
  const double n = double(ep), a = assignments, E = double(experts);
  // A rank's share of the assignments: Dirichlet-multinomial, variance p (1 - p) (a + E) /
  // (a (E + 1)) with p = 1/ep.
  const double sigma = std::sqrt((1 / n) * (1 - 1 / n) * (a + E) / (a * (E + 1)));
  const double spread = ep == 2 ? std::sqrt(2 / M_PI) : std::sqrt(2 * std::log(n));
  return n * sigma * spread;
}

double expert_reduction_s(const GroupCollectives& g, const ModelShape& m, double expert_elements,
                          double element_bytes) {
  const double per_expert = double(expert_parameters(m));
  if (expert_elements <= 0 || per_expert <= 0) return 0;
  const double experts = expert_elements / per_expert;
  const double C = double(m.width);
  return experts * (2 * g.all_reduce_s(4 * C * C * element_bytes) +
                    g.all_reduce_s(4 * C * element_bytes) + g.all_reduce_s(C * element_bytes));
}

StepTime estimate_step(const Setup& s, const MeshChoice& m, const Cluster& c) {
  StepTime t;
  const ModelShape& model = s.model;
  const double tokens = double(s.batch) * double(model.context);
  const double M = m.micro_batches;
  const int64_t blocks = blocks_per_stage(model, m.pp);
  // The heaviest stage's share: the stage whose blocks cost most, and the head counted on it.
  const double h = double(model.width);
  BlockFlops stage;
  int64_t moe_blocks = 0;
  for (int p = 0; p < m.pp; ++p) {
    const int64_t first = stage_first_block(model, m.pp, p), n = stage_blocks(model, m.pp, p);
    const BlockFlops f = block_flops(model, tokens, first, n);
    if (f.rest + f.experts > stage.rest + stage.experts) {
      stage = f;
      moe_blocks = 0;
      for (int64_t i = first; i < first + n; ++i) moe_blocks += model.moe_block(i) ? 1 : 0;
    }
  }
  // `local`: the head and embeddings at their measured time per micro-batch (on the heaviest
  // stage; with tp, a tp rank's share of the vocabulary), else the head's FLOPs at the blocks'
  // rate.
  const double ends = c.ends_s(m.micro_batch_size, m.tp);
  if (ends == 0) stage.rest += tokens * 6 * h * double(model.vocab);
  const double flops = model_flops(model, tokens);
  // Recomputation adds a forward of the blocks: 4/3 of their work.
  const double recompute = s.checkpoint_activations ? 4.0 / 3 : 1.0;
  // The experts are not split over tp: each rank runs its tokens' share of them.
  const double rank_flops = (stage.rest / m.tp + stage.experts) * recompute / double(m.dp);
  t.compute = rank_flops / c.compute_flops(s.dtype, m.micro_batch_size, m.tp) + M * ends;
  // Unfused attention (not `local`, whose measured blocks include its own): per micro-batch and
  // block the scores, heads/tp x s x s per sequence in the activations' dtype, pass through
  // memory 6 times forward (the first product's output, the masked softmax's read and write,
  // dropout's read and write, the second product's read) and 9 backward (the gradient's write,
  // dropout's and the softmax's reads and writes, the probabilities' read for the values'
  // gradient and the scores' gradient's two reads for the queries' and keys'), 6 more when the
  // forward is recomputed (Dao et al. 2022, section 2.2: these steps are memory-bound).
  if (s.unfused_attention && c.model_flops_per_s.empty()) {
    const double passes = 15 + (s.checkpoint_activations ? 6 : 0);
    const double scores = double(model.heads) / m.tp * double(model.context) *
                          double(model.context) * double(m.micro_batch_size);
    const double bytes = s.dtype == "f32" ? 4 : 2;
    t.compute += M * double(blocks) * passes * scores * bytes / c.hbm_bytes_per_s;
  }

  // Tensor parallelism: two all-reduces of b s h forward and two backward per block (two more
  // for a recomputed forward), one each for the embedding and the head's input, and the
  // vocabulary-parallel cross-entropy's two: its rows' maxima and their sums of exponentials with
  // the target's logit (b s and 2 b s f32 values; tensor/ops/cross_entropy.cc).
  const double act_bytes = s.dtype == "f32" ? 4 : 2;
  const double bs = double(m.micro_batch_size) * double(model.context);
  const double bsh = bs * h;
  if (m.tp > 1) {
    const GroupCollectives g(c, m.tp, 1);
    const double per_block = s.checkpoint_activations ? 6 : 4;
    t.tp = M * ((per_block * double(blocks) + 2) * g.all_reduce_s(bsh * act_bytes) +
                g.all_reduce_s(4 * bs) + g.all_reduce_s(8 * bs));
  }
  // Expert parallelism: per MoE block and micro-batch, the counts' all-to-all, then dispatch and
  // combine forward and their gradients backward: four exchanges of the rank's routed rows
  // (b s x active experts x h; balanced routing), with a recomputed forward two more. The
  // exchanges block: every rank waits there for the rank whose experts got the most rows, so the
  // step also holds the slowest rank's expert compute over the average (expert_imbalance).
  if (m.ep > 1 && moe_blocks > 0) {
    const LinkModel link = group_link(c, m.ep, m.tp);
    const double rows = bsh * model.active_experts() * act_bytes;
    const double per_block = (s.checkpoint_activations ? 6 : 4) * all_to_all_s(link, m.ep, rows) +
                             all_to_all_s(link, m.ep, 8.0 * double(model.experts));
    t.ep = M * double(moe_blocks) * per_block;
    // The rank's expert compute (its share of the stage's, as in `compute` above), and the
    // assignments the ep group routes per MoE block and micro-batch: its ranks' tokens x k.
    const double expert_compute = stage.experts * recompute / double(m.dp) /
                                  c.compute_flops(s.dtype, m.micro_batch_size, m.tp);
    double imbalance =
        s.routing_imbalance >= 0
            ? s.routing_imbalance
            : expert_imbalance(double(m.ep) * bs * model.active_experts(), m.ep, model.experts);
    // A capacity factor F caps every expert, so a rank's experts, at F times the mean.
    if (model.capacity_factor > 0)
      imbalance = std::min(imbalance, std::max(0.0, model.capacity_factor - 1));
    t.ep += imbalance * expert_compute;
  }
  // The pipeline: (p-1)/v micro-batch slots of fill and drain; each stage's input and output
  // gradient cross the boundary once per micro-batch, and the last stage's gradient of the tied
  // table (V/tp x h, the parameters' dtype) goes to the first stage once per micro-batch, whose
  // backward of that micro-batch waits for it (parallel/pipeline/engine.cc); counted exposed.
  if (m.pp > 1) {
    t.bubble = double(m.pp - 1) / m.chunks / M * (t.compute + t.tp + t.ep);
    const GroupCollectives g(c, 2, m.dp * m.tp);
    const double table = double((model.vocab + m.tp - 1) / m.tp) * h;
    const double grad_bytes = s.param_dtype == "bf16" ? 2 : 4;
    t.p2p = 2 * M * m.chunks * g.p2p_s(bsh * act_bytes) + M * g.p2p_s(table * grad_bytes);
  }
  // Data parallelism over the stage's trained parameters; a mixture's experts over the dp / ep
  // ranks holding the same ones.
  const double pb = s.param_dtype == "bf16" ? 2 : 4;
  // The heaviest stage: the first, with the embeddings (and, without a pipeline, the rest).
  const RankParameters rp =
      rank_parameters(model, m.tp, blocks, true, m.pp == 1, m.pp > 1, m.ep, 0);
  const double grad_bytes = double(rp.trained) * pb;
  const double expert_bytes = double(rp.experts) * pb;
  const int expert_dp = m.dp / m.ep;
  const double last_backward = 2.0 / 3 * t.compute / M;  // what overlaps the reduction
  if (m.dp > 1) {
    const GroupCollectives g(c, m.dp, m.tp);
    const GroupCollectives experts(c, expert_dp, m.tp * m.ep);
    const double bucket = std::min(double(s.bucket_bytes), grad_bytes);
    if (s.zero == 0) {
      // The experts' reduction follows backward, not under it (expert_reduction_s).
      const double ar = g.all_reduce_s(grad_bytes);
      const double ex = expert_reduction_s(experts, model, double(rp.experts), pb);
      t.dp_total = ar + ex;
      t.dp = std::max(ar - last_backward, g.all_reduce_s(bucket)) + ex;
    } else if (s.zero <= 2) {
      // Reduce-scatter (stage 2: after every backward) overlapped with backward; the
      // parameters' all-gather after the update exposed.
      const double rs = g.reduce_scatter_s(grad_bytes) + experts.reduce_scatter_s(expert_bytes);
      const double ag = g.all_gather_s(grad_bytes) + experts.all_gather_s(expert_bytes);
      const double reductions = s.zero == 2 ? M : 1;
      const double overlap = s.zero == 2 ? 2.0 / 3 * t.compute : last_backward;
      t.dp_total = reductions * rs + ag;
      t.dp = std::max(reductions * rs - overlap, g.reduce_scatter_s(bucket)) + ag;
    } else {
      // Stage 3: per micro-batch, the units gathered for forward and again for backward and the
      // gradients reduce-scattered, prefetched under the compute; the first gather exposed.
      const double ag = g.all_gather_s(grad_bytes);
      const double rs = g.reduce_scatter_s(grad_bytes);
      t.dp_total = M * (2 * ag + rs);
      const double unit = grad_bytes / std::max<double>(1, double(model.layers));
      t.dp = std::max(0.0, t.dp_total - t.compute) + g.all_gather_s(unit);
    }
  }
  if (!s.overlap_dp) t.dp = t.dp_total;  // after backward: all of it exposed
  // AdamW: reads parameter, gradient and two moments, writes parameter and moments (and the
  // master copy's 8 bytes), over the elements this rank updates.
  const double shard = s.zero >= 1 ? double(rp.trained) / m.dp + double(rp.experts) / expert_dp
                                   : double(rp.trained + rp.experts);
  const double bytes_per = 3 * pb + 16 + (pb < 4 ? 8 : 0);
  t.optimizer = shard * bytes_per / c.hbm_bytes_per_s;
  // `local` measures the update itself (the gradient norm's pass and AdamW's per-element square
  // root and division, in f32: 28 bytes a parameter): its time per step plus per parameter, the
  // latter scaled by the bytes a 16-bit parameter's update moves against f32's.
  if (c.optimizer_s_per_element > 0)
    t.optimizer =
        c.optimizer_fixed_s + shard * c.optimizer_s_per_element * bytes_per / (3 * 4 + 16);

  t.total = t.compute + t.tp + t.bubble + t.p2p + t.ep + t.dp + t.optimizer;
  t.tokens_per_s = tokens / t.total;
  t.mfu = flops / t.total / (double(c.world()) * c.flops(s.dtype));
  return t;
}

}  // namespace chorus::plan
