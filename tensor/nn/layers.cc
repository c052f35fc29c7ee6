// The GPT's modules: Linear, Embedding, LayerNorm, MLP, CausalSelfAttention, Block (the MoE:
// moe.cc).
#include <cmath>

#include "chorus/tensor/nn.h"
#include "chorus/tensor/random.h"

namespace chorus::tensor::nn {
namespace {

// A parameter as the dtype the computation runs in: itself when they agree, else a
// differentiable cast (a 16-bit model on f32 inputs; its gradient comes back in its own dtype).
Tensor as_dtype(const Tensor& p, DataType dtype) {
  return !p.defined() || p.dtype() == dtype ? p : p.to(dtype);
}

// The dtype a 16-bit table computes in.
DataType compute_dtype(DataType stored) {
  return stored == DataType::kBF16 || stored == DataType::kF16 ? DataType::kF32 : stored;
}

}  // namespace

Linear::Linear(int64_t in, int64_t out, bool with_bias, double init_std) : init_std_(init_std) {
  weight = register_parameter("weight", Tensor::zeros({out, in}));
  if (with_bias) bias = register_parameter("bias", Tensor::zeros({out}));
}

void Linear::reset_parameters(const std::string& prefix, uint64_t seed) {
  fill_normal_(weight, {seed, stream_id(prefix + "weight")}, 0.0, init_std_);
  if (bias.defined()) bias.zero_();
}

Tensor Linear::forward(const Tensor& x) const {
  return hooked([&] { return linear(x, as_dtype(weight, x.dtype()), as_dtype(bias, x.dtype())); });
}

Embedding::Embedding(int64_t num, int64_t dim) {
  weight = register_parameter("weight", Tensor::zeros({num, dim}));
}

Tensor Embedding::forward(const Tensor& idx) const {
  return hooked([&] { return embedding(idx, as_dtype(weight, compute_dtype(weight.dtype()))); });
}

Tensor Embedding::tied_logits(const Tensor& x) const {
  return linear(x, as_dtype(weight, x.dtype()));
}

Tensor Embedding::tied_loss(const Tensor& logits, const Tensor& targets) const {
  return cross_entropy(logits, targets);
}

LayerNorm::LayerNorm(int64_t dim) {
  weight = register_parameter("weight", Tensor::ones({dim}));
  bias = register_parameter("bias", Tensor::zeros({dim}));
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return hooked(
      [&] { return layernorm(x, as_dtype(weight, x.dtype()), as_dtype(bias, x.dtype())); });
}

namespace {
// GPT-2 scales the init of projections that write into the residual stream by 1/sqrt(2L):
// each block adds two of them.
double residual_std(const GPTConfig& cfg) { return 0.02 / std::sqrt(2.0 * double(cfg.layers)); }
}  // namespace

MLP::MLP(const GPTConfig& cfg) {
  register_module("c_fc", c_fc, std::make_shared<Linear>(cfg.width, 4 * cfg.width));
  register_module("c_proj", c_proj,
                  std::make_shared<Linear>(4 * cfg.width, cfg.width, true, residual_std(cfg)));
}

Tensor MLP::forward(const Tensor& x) const {
  return hooked([&] { return c_proj->forward(gelu(c_fc->forward(x))); });
}

CausalSelfAttention::CausalSelfAttention(const GPTConfig& cfg) : heads(cfg.heads) {
  CHORUS_ARG_CHECK(cfg.heads > 0 && cfg.width % cfg.heads == 0, "attention: width ", cfg.width,
                   " is not a multiple of heads ", cfg.heads);
  register_module("c_attn", c_attn, std::make_shared<Linear>(cfg.width, 3 * cfg.width));
  register_module("c_proj", c_proj,
                  std::make_shared<Linear>(cfg.width, cfg.width, true, residual_std(cfg)));
}

Tensor CausalSelfAttention::forward(const Tensor& x) const {
  // qkv (B, T, 3C) read in place as (B, T, 3, NH, HS); the output comes back as (B, T, C),
  // heads side by side (causal_attention on q/k/v views, without the transposes' copies).
  return hooked([&] { return c_proj->forward(causal_attention_qkv(c_attn->forward(x), heads)); });
}

Block::Block(const GPTConfig& cfg, bool moe_block)
    : dropout(cfg.dropout), aux_loss_coef(cfg.aux_loss_coef), z_loss_coef(cfg.z_loss_coef) {
  register_module("ln_1", ln_1, std::make_shared<LayerNorm>(cfg.width));
  register_module("attn", attn, std::make_shared<CausalSelfAttention>(cfg));
  register_module("ln_2", ln_2, std::make_shared<LayerNorm>(cfg.width));
  if (moe_block)
    register_module("mlp", moe, std::make_shared<MoE>(cfg));
  else
    register_module("mlp", mlp, std::make_shared<MLP>(cfg));
}

Tensor Block::forward(const Tensor& x, RngKey rng, std::vector<Tensor>* aux) const {
  return hooked([&] {
    const RngKey k_attn{rng.seed, rng.stream ^ 0x1}, k_mlp{rng.seed, rng.stream ^ 0x2};
    Tensor a = attn->forward(ln_1->forward(x));
    Tensor h = add(x, dropout > 0 ? tensor::dropout(a, dropout, k_attn) : a);
    Tensor m;
    if (moe) {
      MoEStats stats;
      m = moe->forward(ln_2->forward(h), aux ? &stats : nullptr);
      if (aux)
        aux->push_back(
            add(scale(stats.load_balance, aux_loss_coef), scale(stats.z_loss, z_loss_coef)));
    } else {
      m = mlp->forward(ln_2->forward(h));
    }
    return add(h, dropout > 0 ? tensor::dropout(m, dropout, k_mlp) : m);
  });
}

}  // namespace chorus::tensor::nn
