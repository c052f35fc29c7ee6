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

int64_t parameter_count(const ModelShape& m) {
  const int64_t C = m.width;
  return m.layers * (12 * C * C + 13 * C) + m.vocab * C + m.context * C + 2 * C;
}

RankParameters rank_parameters(const ModelShape& m, int tp, int64_t blocks, bool first, bool last,
                               bool pipelined) {
  const int64_t C = m.width, t = tp;
  // c_attn 3C^2 + 3C and c_fc 4C^2 + 4C column-parallel; both c_proj (C^2 and 4C^2) row-parallel
  // with their C biases whole; two LayerNorms (4C) whole.
  const int64_t block = 12 * C * C / t + 7 * C / t + 2 * C + 4 * C;
  const int64_t table = (m.vocab + t - 1) / t * C;  // padded to a multiple of tp
  RankParameters r;
  r.trained = blocks * block;
  if (first) r.trained += table + m.context * C;
  if (last) r.trained += 2 * C;
  if (last && pipelined && !first) r.head_copy = table;
  return r;
}

int64_t blocks_per_stage(const ModelShape& m, int pp) { return (m.layers + pp - 1) / pp; }

double model_flops(const ModelShape& m, double tokens) {
  const double s = double(m.context), h = double(m.width), l = double(m.layers),
               V = double(m.vocab);
  return 72.0 * tokens * l * h * h * (1 + s / (6 * h) + V / (12 * h * l));
}

}  // namespace chorus::plan
