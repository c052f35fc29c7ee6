#include "model.h"

#include <algorithm>

#include "error.h"

namespace chorus::plan {

const std::vector<ModelShape>& model_presets() {
  static const std::vector<ModelShape> presets = {
      {"gpt2-124m", "GPT-2 small (Radford et al. 2019; the released config)", 12, 768, 12, 1024,
       50257},
      {"gpt2-350m", "GPT-2 medium (Radford et al. 2019; the released config)", 24, 1024, 16, 1024,
       50257},
      {"gpt2-760m", "GPT-2 large (Radford et al. 2019; the released config)", 36, 1280, 20, 1024,
       50257},
      {"gpt2-1.5b", "GPT-2 XL (Radford et al. 2019; the released config)", 48, 1600, 25, 1024,
       50257},
      {"gpt-7b", "GPT-3 6.7B (Brown et al. 2020, table 2.1: 32 x 4096, 32 heads, context 2048)", 32,
       4096, 32, 2048, 50257},
      {"gpt-70b",
       "Llama 2 70B's depth and width (Touvron et al. 2023, table 1: 80 x 8192, 64 heads, "
       "context 4096, vocabulary 32000) in chorus's GPT block",
       80, 8192, 64, 4096, 32000},
      {"gpt-1.3b-moe128",
       "DeepSpeed-MoE's 1.3B+MoE-128 (Rajbhandari et al. 2022, table 1 and section 3: GPT-3 "
       "1.3B's 24 x 2048, context 2048, with 128 experts in every other block, top-1); 16 heads "
       "of 128 (chorus's block needs the heads to divide the width)",
       24, 2048, 16, 2048, 50257, 128, 1, 2},
  };
  return presets;
}

ModelShape model_preset(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& p : model_presets()) {
    if (p.name == name) return p;
    names.push_back(p.name);
  }
  fail_unknown("model preset", name, names);
}

double ModelShape::active_experts() const {
  const double k = double(top_k);
  return capacity_factor > 0 ? std::min(k, capacity_factor * k) : k;
}

int64_t expert_parameters(const ModelShape& m) { return 8 * m.width * m.width + 5 * m.width; }

namespace {

int64_t moe_blocks_in(const ModelShape& m, int64_t first_block, int64_t blocks) {
  int64_t n = 0;
  for (int64_t i = first_block; i < first_block + blocks; ++i) n += m.moe_block(i) ? 1 : 0;
  return n;
}

int64_t count_with_experts(const ModelShape& m, int64_t experts_per_moe_block) {
  const int64_t C = m.width, moe = moe_blocks_in(m, 0, m.layers);
  const int64_t dense = m.layers * (12 * C * C + 13 * C) + m.vocab * C + m.context * C + 2 * C;
  // An MoE block trades its MLP for the router and its experts.
  return dense + moe * (C * m.experts + (experts_per_moe_block - 1) * expert_parameters(m));
}

}  // namespace

int64_t parameter_count(const ModelShape& m) { return count_with_experts(m, m.experts); }

int64_t active_parameter_count(const ModelShape& m) {
  return m.experts > 0 ? count_with_experts(m, m.top_k) : parameter_count(m);
}

RankParameters rank_parameters(const ModelShape& m, int tp, int64_t blocks, bool first, bool last,
                               bool pipelined, int ep, int64_t first_block) {
  const int64_t C = m.width, t = tp;
  // c_attn 3C^2 + 3C and c_fc 4C^2 + 4C column-parallel; both c_proj (C^2 and 4C^2) row-parallel
  // with their C biases whole; two LayerNorms (4C) whole.
  const int64_t block = 12 * C * C / t + 7 * C / t + 2 * C + 4 * C;
  // An MoE block: the attention's 4C^2 + 3C / tp and C whole, the LayerNorms, the router.
  const int64_t moe_block = 4 * C * C / t + 3 * C / t + C + 4 * C + C * m.experts;
  const int64_t table = (m.vocab + t - 1) / t * C;  // padded to a multiple of tp
  const int64_t moe = moe_blocks_in(m, first_block, blocks);
  RankParameters r;
  r.trained = (blocks - moe) * block + moe * moe_block;
  r.experts = moe * (m.experts / ep) * expert_parameters(m);
  if (first) r.trained += table + m.context * C;
  if (last) r.trained += 2 * C;
  if (last && pipelined && !first) r.head_copy = table;
  return r;
}

int64_t blocks_per_stage(const ModelShape& m, int pp) { return (m.layers + pp - 1) / pp; }

int64_t stage_blocks(const ModelShape& m, int pp, int stage) {
  return m.layers / pp + (stage < m.layers % pp ? 1 : 0);
}

int64_t stage_first_block(const ModelShape& m, int pp, int stage) {
  int64_t first = 0;
  for (int s = 0; s < stage; ++s) first += stage_blocks(m, pp, s);
  return first;
}

BlockFlops block_flops(const ModelShape& m, double tokens, int64_t first_block, int64_t blocks) {
  const double s = double(m.context), h = double(m.width);
  const double moe = double(moe_blocks_in(m, first_block, blocks));
  BlockFlops f;
  f.rest = tokens * ((double(blocks) - moe) * (72 * h * h + 12 * s * h) +
                     moe * (24 * h * h + 12 * s * h + 6 * h * double(m.experts)));
  f.experts = tokens * moe * 48 * h * h * m.active_experts();
  return f;
}

double model_flops(const ModelShape& m, double tokens) {
  const BlockFlops f = block_flops(m, tokens, 0, m.layers);
  return f.rest + f.experts + tokens * 6 * double(m.width) * double(m.vocab);
}

}  // namespace chorus::plan
