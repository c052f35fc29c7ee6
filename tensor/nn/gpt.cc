// GPT-2 (the llm.c layout): logits = ln_f(blocks(wte[idx] + wpe[t])) @ wte^T.
#include <span>

#include "chorus/tensor/checkpoint.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/random.h"

namespace chorus::tensor::nn {

GPT::GPT(GPTConfig cfg) : cfg_(cfg) {
  CHORUS_ARG_CHECK(cfg.vocab > 0 && cfg.context > 0 && cfg.layers > 0 && cfg.width > 0,
                   "GPT: vocab, context, layers and width must be positive");
  CHORUS_ARG_CHECK(cfg.experts >= 0, "GPT: experts must be 0 (dense) or positive, got ",
                   cfg.experts);
  CHORUS_ARG_CHECK(cfg.moe_every >= 1, "GPT: moe_every must be at least 1, got ", cfg.moe_every);
  register_module("wte", wte, std::make_shared<Embedding>(cfg.vocab, cfg.width));
  register_module("wpe", wpe, std::make_shared<Embedding>(cfg.context, cfg.width));
  h.resize(static_cast<size_t>(cfg.layers));  // never resized again: registration points into it
  for (int64_t i = 0; i < cfg.layers; ++i)
    register_module("h." + std::to_string(i), h[static_cast<size_t>(i)],
                    std::make_shared<Block>(cfg, cfg.moe_block(i)));
  register_module("ln_f", ln_f, std::make_shared<LayerNorm>(cfg.width));
}

Tensor GPT::embed(const Tensor& idx) const {
  CHORUS_ARG_CHECK(idx.dim() == 2, "GPT: idx must be (B, T), got ", to_string(idx.shape()));
  const int64_t B = idx.size(0), T = idx.size(1);
  CHORUS_ARG_CHECK(T <= cfg_.context, "GPT: sequence of ", T, " exceeds the context ",
                   cfg_.context);
  // Positions (B, T): every row 0..T-1.
  std::vector<int64_t> pos(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B * T; ++i) pos[i] = i % T;
  const Tensor positions =
      Tensor::from_vector(std::span<const int64_t>(pos), {B, T}).to(idx.device());
  return add(wte->forward(idx), wpe->forward(positions));  // (B, T, C)
}

void GPT::set_activation_checkpointing(bool on) { checkpoint_blocks_ = on; }

namespace {

// An MoE block checkpointed with its auxiliary loss: checkpoint() keeps one output, so the
// block's (N, C) rows and, in one more row, its weighted auxiliary loss (element 0; the rest
// zeros) travel as one (N + 1, C) tensor. Its recomputation in backward then rebuilds the
// auxiliary loss's graph with the block's and back-propagates both. Recomputed from the same
// input, the router's probabilities, and with them the routing (and, expert parallel, every
// count and row exchanged), are the forward's bits; every rank recomputes its blocks in the same
// order, so the exchanges pair up as in the forward.
Tensor checkpoint_moe_block(const Block* blk, RngKey key, const Tensor& x,
                            std::vector<Tensor>& aux) {
  const int64_t C = x.size(-1), N = x.numel() / C;
  const Shape shape = x.shape();
  const Tensor packed = checkpoint(
      [blk, key, N, C](const Tensor& in) {
        std::vector<Tensor> mine;
        const Tensor y = blk->forward(in, key, &mine);
        std::vector<int64_t> rows(static_cast<size_t>(N));
        for (int64_t i = 0; i < N; ++i) rows[static_cast<size_t>(i)] = i;
        const std::vector<int64_t> last{N};
        auto index = [&](const std::vector<int64_t>& v) {
          return Tensor::from_vector(std::span<const int64_t>(v), {static_cast<int64_t>(v.size())})
              .to(y.device());
        };
        const Tensor one = Tensor::ones({1, C}, y.dtype(), y.device());
        Tensor out = Tensor::zeros({N + 1, C}, y.dtype(), y.device());
        out = index_add_rows(out, index(rows), y.view({N, C}));
        return index_add_rows(out, index(last), scale_rows(one, mine.at(0).view({1})));
      },
      x, blk->parameters());
  aux.push_back(packed.narrow(0, N, 1).narrow(1, 0, 1).view({}));
  return packed.narrow(0, 0, N).view(shape);
}

}  // namespace

Tensor GPT::blocks(const Tensor& x_in, int64_t begin, int64_t end, uint64_t step,
                   std::vector<Tensor>* aux) const {
  CHORUS_ARG_CHECK(0 <= begin && begin <= end && end <= cfg_.layers, "GPT: blocks [", begin, ", ",
                   end, ") of ", cfg_.layers);
  Tensor x = x_in;
  for (int64_t i = begin; i < end; ++i) {
    const RngKey key{dropout_seed,
                     stream_id("h." + std::to_string(i)) + step * 0x9E3779B97F4A7C15ull};
    const Block* blk = h[static_cast<size_t>(i)].get();
    if (checkpoint_blocks_ && blk->moe && aux)
      x = checkpoint_moe_block(blk, key, x, *aux);
    else if (checkpoint_blocks_)
      x = checkpoint([blk, key](const Tensor& in) { return blk->forward(in, key); }, x,
                     blk->parameters());
    else
      x = blk->forward(x, key, aux);
  }
  return x;
}

Tensor GPT::head(const Tensor& x) const {
  return wte->tied_logits(ln_f->forward(x));  // (B, T, V): lm_head tied to the token embedding
}

Tensor GPT::forward(const Tensor& idx, uint64_t step) const {
  return hooked([&] { return head(blocks(embed(idx), 0, cfg_.layers, step)); });
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets, uint64_t step) const {
  std::vector<Tensor> aux;
  Tensor logits = hooked([&] { return head(blocks(embed(idx), 0, cfg_.layers, step, &aux)); });
  const int64_t N = idx.numel();
  Tensor loss = wte->tied_loss(logits.view({N, logits.size(-1)}), targets.reshape({N}));
  for (const Tensor& a : aux) loss = add(loss, a);
  return loss;
}

}  // namespace chorus::tensor::nn
