#include "step_time.h"

#include <algorithm>

#include "collectives.h"

namespace chorus::plan {

StepTime estimate_step(const Setup& s, const MeshChoice& m, const Cluster& c) {
  StepTime t;
  const ModelShape& model = s.model;
  const double tokens = double(s.batch) * double(model.context);
  const double M = m.micro_batches;
  const int64_t blocks = blocks_per_stage(model, m.pp);
  // The heaviest stage's share: its blocks, and the head's V/(12 h l) term on one stage.
  const double l = double(model.layers), h = double(model.width), V = double(model.vocab);
  const double block_part = 1 + double(model.context) / (6 * h);
  const double whole = l * block_part + V / (12 * h);
  const double stage_part = (double(blocks) * block_part + V / (12 * h)) / whole;
  const double flops = model_flops(model, tokens);
  // Recomputation adds a forward of the blocks: 4/3 of their work.
  const double recompute = s.checkpoint_activations ? 4.0 / 3 : 1.0;
  const double rank_flops = flops * stage_part * recompute / (double(m.dp) * m.tp);
  t.compute = rank_flops / c.compute_flops(s.dtype);

  // Tensor parallelism: two all-reduces of b s h forward and two backward per block (two more
  // for a recomputed forward), one each for the embedding and the head's input.
  const double act_bytes = s.dtype == "f32" ? 4 : 2;
  const double bsh = double(m.micro_batch_size) * double(model.context) * h;
  if (m.tp > 1) {
    const GroupCollectives g(c, m.tp, 1);
    const double per_block = s.checkpoint_activations ? 6 : 4;
    t.tp = M * (per_block * double(blocks) + 2) * g.all_reduce_s(bsh * act_bytes);
  }
  // The pipeline: (p-1)/v micro-batch slots of fill and drain; each stage's input and output
  // gradient cross the boundary once per micro-batch (counted exposed).
  if (m.pp > 1) {
    t.bubble = double(m.pp - 1) / m.chunks / M * (t.compute + t.tp);
    const GroupCollectives g(c, 2, m.dp * m.tp);
    t.p2p = 2 * M * m.chunks * g.p2p_s(bsh * act_bytes);
  }
  // Data parallelism over the stage's trained parameters.
  const double pb = s.param_dtype == "bf16" ? 2 : 4;
  // The heaviest stage: the first, with the embeddings (and, without a pipeline, the rest).
  const RankParameters rp = rank_parameters(model, m.tp, blocks, true, m.pp == 1, m.pp > 1);
  const double grad_bytes = double(rp.trained) * pb;
  const double last_backward = 2.0 / 3 * t.compute / M;  // what overlaps the reduction
  if (m.dp > 1) {
    const GroupCollectives g(c, m.dp, m.tp);
    const double bucket = std::min(double(s.bucket_bytes), grad_bytes);
    if (s.zero == 0) {
      const double ar = g.all_reduce_s(grad_bytes);
      t.dp_total = ar;
      t.dp = std::max(ar - last_backward, g.all_reduce_s(bucket));
    } else if (s.zero <= 2) {
      // Reduce-scatter (stage 2: after every backward) overlapped with backward; the
      // parameters' all-gather after the update exposed.
      const double rs = g.reduce_scatter_s(grad_bytes);
      const double ag = g.all_gather_s(grad_bytes);
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
  // AdamW: reads parameter, gradient and two moments, writes parameter and moments (and the
  // master copy's 8 bytes), over the elements this rank updates.
  const double shard = double(rp.trained) / (s.zero >= 1 ? m.dp : 1);
  const double bytes_per = 3 * pb + 16 + (pb < 4 ? 8 : 0);
  t.optimizer = shard * bytes_per / c.hbm_bytes_per_s;

  t.total = t.compute + t.tp + t.bubble + t.p2p + t.dp + t.optimizer;
  t.tokens_per_s = tokens / t.total;
  t.mfu = flops / t.total / (double(c.world()) * c.flops(s.dtype));
  return t;
}

}  // namespace chorus::plan
