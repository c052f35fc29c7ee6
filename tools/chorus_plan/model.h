// chorus-plan: the model being planned (the GPT's shape as chorus-train takes it) and the presets
// of well-known sizes; the parameter counts that every memory and time estimate starts from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace chorus::plan {

// A GPT-2-shaped model as chorus builds it (tensor/nn.h): token and position embeddings, `layers`
// pre-LayerNorm blocks (fused qkv, 4x MLP, biases everywhere), a final LayerNorm and an lm_head
// tied to the token embedding.
struct ModelShape {
  std::string name;    // a preset's name, or "custom"
  std::string source;  // where a preset's shape comes from
  int64_t layers = 4, width = 128, heads = 4, context = 64, vocab = 256;
};

// The presets: gpt2-124m, gpt2-350m, gpt2-760m, gpt2-1.5b, llama-7b-shape, llama-70b-shape.
const std::vector<ModelShape>& model_presets();
// The preset called `name`; throws PlanError naming the nearest preset and the valid ones.
ModelShape model_preset(const std::string& name);

// Parameter elements of the whole model (the tied head counted once).
int64_t parameter_count(const ModelShape& m);

// What one rank of a tp x pp split holds, in elements. `blocks` is the stage's number of blocks;
// `first`/`last` say whether the stage holds the embeddings / the final LayerNorm and head.
// Matrices and the vocabulary table are split over tp (the vocabulary padded to a multiple of
// tp); LayerNorms, row-parallel biases and the position embedding are whole on every tp rank.
struct RankParameters {
  int64_t trained = 0;    // parameters this rank owns, with gradients and optimizer state
  int64_t head_copy = 0;  // the last stage's copy of the tied table (pp > 1): parameter only
};
RankParameters rank_parameters(const ModelShape& m, int tp, int64_t blocks, bool first, bool last,
                               bool pipelined);

// Blocks on the heaviest of pp stages (the stages are cut as evenly as the layers allow).
int64_t blocks_per_stage(const ModelShape& m, int pp);

// The model FLOPs of one training step over `tokens` tokens (Narayanan et al. 2021, eq. 3
// without the recomputation: 72 B s l h^2 (1 + s/(6h) + V/(12 h l)) per B s tokens).
double model_flops(const ModelShape& m, double tokens);

}  // namespace chorus::plan
