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
  // A mixture of experts (chorus-train's --experts, --top-k, --moe-every, --capacity-factor):
  // block i's MLP is `experts` MLPs behind a router (C x E, no bias) when
  // i % moe_every == moe_every - 1; experts 0 is the dense GPT.
  int64_t experts = 0, top_k = 1, moe_every = 1;
  double capacity_factor = 0;  // 0: dropless
  bool moe_block(int64_t i) const { return experts > 0 && i % moe_every == moe_every - 1; }
  // Expert MLPs a token runs through on average: top_k, or fewer where the capacity drops
  // assignments (at most capacity_factor x top_k with balanced routing).
  double active_experts() const;
};

// The presets: gpt2-124m, gpt2-350m, gpt2-760m, gpt2-1.5b, gpt-7b, gpt-70b, gpt-1.3b-moe128.
const std::vector<ModelShape>& model_presets();
// The preset called `name`; throws PlanError naming the nearest preset and the valid ones.
ModelShape model_preset(const std::string& name);

// Parameter elements of the whole model (the tied head counted once), and those a token uses
// (the top-k experts of each MoE block instead of all E).
int64_t parameter_count(const ModelShape& m);
int64_t active_parameter_count(const ModelShape& m);

// One expert MLP's elements (c_fc and c_proj with biases: 8 C^2 + 5 C).
int64_t expert_parameters(const ModelShape& m);

// What one rank of a tp x pp split holds, in elements. `blocks` is the stage's number of blocks;
// `first`/`last` say whether the stage holds the embeddings / the final LayerNorm and head.
// Matrices and the vocabulary table are split over tp (the vocabulary padded to a multiple of
// tp); LayerNorms, row-parallel biases and the position embedding are whole on every tp rank.
// An MoE block's experts are not split over tp; the rank holds E/ep of them (`experts`, reduced
// and sharded over the dp/ep ranks that hold the same ones) and the router (in `trained`).
// `first_block` is the stage's first block's index (which blocks are MoE blocks).
struct RankParameters {
  int64_t trained = 0;    // parameters this rank owns, with gradients and optimizer state
  int64_t head_copy = 0;  // the last stage's copy of the tied table (pp > 1): parameter only
  int64_t experts = 0;    // this rank's experts' parameters (with gradients and optimizer state)
};
RankParameters rank_parameters(const ModelShape& m, int tp, int64_t blocks, bool first, bool last,
                               bool pipelined, int ep = 1, int64_t first_block = 0);

// Blocks on the heaviest of pp stages (the stages are cut as evenly as the layers allow), and
// stage `stage`'s blocks and first block (the first stages take the rest).
int64_t blocks_per_stage(const ModelShape& m, int pp);
int64_t stage_blocks(const ModelShape& m, int pp, int stage);
int64_t stage_first_block(const ModelShape& m, int pp, int stage);

// The model FLOPs of one training step over `tokens` tokens (Narayanan et al. 2021, eq. 3
// without the recomputation: 72 B s l h^2 (1 + s/(6h) + V/(12 h l)) per B s tokens). Per token a
// dense block costs 72 h^2 + 12 s h (forward and backward), an MoE block 24 h^2 + 12 s h for the
// attention, 6 h E for the router and 48 h^2 per active expert; the head 6 h V.
double model_flops(const ModelShape& m, double tokens);
// The same for blocks [first_block, first_block + blocks) only, split into the experts' share
// (not divided by tp) and the rest.
struct BlockFlops {
  double experts = 0, rest = 0;
};
BlockFlops block_flops(const ModelShape& m, double tokens, int64_t first_block, int64_t blocks);

}  // namespace chorus::plan
