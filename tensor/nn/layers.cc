// The GPT's modules: Linear, Embedding, LayerNorm, MLP, CausalSelfAttention, Block.
#include <cmath>

#include "chorus/tensor/nn.h"
#include "chorus/tensor/random.h"

namespace chorus::tensor::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias, double init_std) : init_std_(init_std) {
  weight = register_parameter("weight", Tensor::zeros({out, in}));
  if (with_bias) bias = register_parameter("bias", Tensor::zeros({out}));
}

void Linear::reset_parameters(const std::string& prefix, uint64_t seed) {
  fill_normal_(weight, {seed, stream_id(prefix + "weight")}, 0.0, init_std_);
  if (bias.defined()) bias.zero_();
}

Embedding::Embedding(int64_t num, int64_t dim) {
  weight = register_parameter("weight", Tensor::zeros({num, dim}));
}

LayerNorm::LayerNorm(int64_t dim) {
  weight = register_parameter("weight", Tensor::ones({dim}));
  bias = register_parameter("bias", Tensor::zeros({dim}));
}

namespace {
// GPT-2 scales the init of projections that write into the residual stream by 1/sqrt(2L):
// each block adds two of them.
double residual_std(const GPTConfig& cfg) { return 0.02 / std::sqrt(2.0 * double(cfg.layers)); }
}  // namespace

MLP::MLP(const GPTConfig& cfg) {
  c_fc = register_module("c_fc", std::make_shared<Linear>(cfg.width, 4 * cfg.width));
  c_proj = register_module("c_proj",
                           std::make_shared<Linear>(4 * cfg.width, cfg.width, true, residual_std(cfg)));
}

CausalSelfAttention::CausalSelfAttention(const GPTConfig& cfg) : heads(cfg.heads) {
  CHORUS_ARG_CHECK(cfg.heads > 0 && cfg.width % cfg.heads == 0, "attention: width ", cfg.width,
                   " is not a multiple of heads ", cfg.heads);
  c_attn = register_module("c_attn", std::make_shared<Linear>(cfg.width, 3 * cfg.width));
  c_proj = register_module("c_proj",
                           std::make_shared<Linear>(cfg.width, cfg.width, true, residual_std(cfg)));
}

Tensor CausalSelfAttention::forward(const Tensor& x) const {
  // qkv (B, T, 3C) read in place as (B, T, 3, NH, HS); the output comes back as (B, T, C),
  // heads side by side (causal_attention on q/k/v views, without the transposes' copies).
  return c_proj->forward(causal_attention_qkv(c_attn->forward(x), heads));
}

Block::Block(const GPTConfig& cfg) : dropout(cfg.dropout) {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(cfg.width));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(cfg));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(cfg.width));
  mlp = register_module("mlp", std::make_shared<MLP>(cfg));
}

Tensor Block::forward(const Tensor& x, RngKey rng) const {
  const RngKey k_attn{rng.seed, rng.stream ^ 0x1}, k_mlp{rng.seed, rng.stream ^ 0x2};
  Tensor h = add(x, dropout > 0 ? tensor::dropout(attn->forward(ln_1->forward(x)), dropout, k_attn)
                                : attn->forward(ln_1->forward(x)));
  return add(h, dropout > 0 ? tensor::dropout(mlp->forward(ln_2->forward(h)), dropout, k_mlp)
                            : mlp->forward(ln_2->forward(h)));
}

}  // namespace chorus::tensor::nn
