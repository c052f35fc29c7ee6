// GPT-2 (the llm.c layout): logits = ln_f(blocks(wte[idx] + wpe[t])) @ wte^T.
#include "chorus/tensor/checkpoint.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/random.h"

namespace chorus::tensor::nn {

GPT::GPT(GPTConfig cfg) : cfg_(cfg) {
  CHORUS_ARG_CHECK(cfg.vocab > 0 && cfg.context > 0 && cfg.layers > 0 && cfg.width > 0,
                   "GPT: vocab, context, layers and width must be positive");
  wte = register_module("wte", std::make_shared<Embedding>(cfg.vocab, cfg.width));
  wpe = register_module("wpe", std::make_shared<Embedding>(cfg.context, cfg.width));
  for (int64_t i = 0; i < cfg.layers; ++i)
    h.push_back(register_module("h." + std::to_string(i), std::make_shared<Block>(cfg)));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(cfg.width));
}

Tensor GPT::forward(const Tensor& idx, uint64_t step) const {
  CHORUS_ARG_CHECK(idx.dim() == 2, "GPT: idx must be (B, T), got ", to_string(idx.shape()));
  const int64_t B = idx.size(0), T = idx.size(1);
  CHORUS_ARG_CHECK(T <= cfg_.context, "GPT: sequence of ", T, " exceeds the context ", cfg_.context);
  // Positions (B, T): every row 0..T-1.
  std::vector<int64_t> pos(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B * T; ++i) pos[i] = i % T;
  const Tensor positions = Tensor::from_vector(std::span<const int64_t>(pos), {B, T});
  Tensor x = add(wte->forward(idx), wpe->forward(positions));  // (B, T, C)
  for (size_t i = 0; i < h.size(); ++i) {
    const RngKey key{dropout_seed, stream_id("h." + std::to_string(i)) + step * 0x9E3779B97F4A7C15ull};
    const Block* blk = h[i].get();
    if (checkpoint_blocks_)
      x = checkpoint([blk, key](const Tensor& in) { return blk->forward(in, key); }, x,
                     blk->parameters());
    else
      x = blk->forward(x, key);
  }
  x = ln_f->forward(x);
  return linear(x, wte->weight);  // (B, T, V), lm_head tied to the token embedding
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets, uint64_t step) const {
  Tensor logits = forward(idx, step);
  const int64_t N = idx.numel();
  return cross_entropy(logits.view({N, cfg_.vocab}), targets.reshape({N}));
}

}  // namespace chorus::tensor::nn
