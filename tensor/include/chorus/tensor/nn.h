// chorus::tensor::nn — modules with stable, hierarchical parameter names.
//
// A Module owns parameters and child modules, registered under names; named_parameters()
// walks them depth-first in registration order and yields "h.0.attn.c_attn.weight"-style
// names. Names are the checkpoint keys and the RNG streams of initialisation: init(seed) gives
// each parameter values keyed by (seed, stream_id(name), element index), so a model's values
// depend only on the seed and its structure, never on construction order or sharding.
//
// Shape legend as in ops.h: B batch, T time, C width, NH heads, V vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chorus/tensor/ops.h"
#include "chorus/tensor/tensor.h"

namespace chorus::tensor::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;
  // Drops every parameter's gradient (the next backward allocates fresh zeros).
  void zero_grad();
  // Initialises every parameter from the counter-based RNG (see reset_parameters).
  void init(uint64_t seed);

  // Checkpoint I/O: copies values by name; shapes and names must match exactly.
  NamedTensors state_dict() const { return named_parameters(); }
  void load_state_dict(const NamedTensors& state);

 protected:
  // Registers a parameter (requires_grad set) and returns it.
  Tensor register_parameter(std::string name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    children_.emplace_back(std::move(name), module);
    return module;
  }
  // Fills this module's own parameters; `prefix` is its full name ("h.0.attn."). The default:
  // matrices ~ N(0, 0.02), vectors named "bias" zeros, other vectors ones.
  virtual void reset_parameters(const std::string& prefix, uint64_t seed);

 private:
  void collect(const std::string& prefix, NamedTensors& out) const;
  void init_recursive(const std::string& prefix, uint64_t seed);
  NamedTensors params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// x (..., in) -> (..., out)
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias = true, double init_std = 0.02);
  Tensor forward(const Tensor& x) const { return linear(x, weight, bias); }
  Tensor weight;  // (out, in)
  Tensor bias;    // (out) or undefined

 protected:
  void reset_parameters(const std::string& prefix, uint64_t seed) override;

 private:
  double init_std_;
};

// idx (B, T) -> (B, T, C)
class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim);
  Tensor forward(const Tensor& idx) const { return embedding(idx, weight); }
  Tensor weight;  // (num, dim)
};

// x (..., C) -> (..., C)
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim);
  Tensor forward(const Tensor& x) const { return layernorm(x, weight, bias); }
  Tensor weight, bias;  // (C)
};

struct GPTConfig {
  int64_t vocab = 256;
  int64_t context = 128;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t width = 128;
  double dropout = 0.0;
};

// x (B, T, C) -> (B, T, C): c_fc (C -> 4C), gelu, c_proj (4C -> C)
class MLP : public Module {
 public:
  MLP(const GPTConfig& cfg);
  Tensor forward(const Tensor& x) const { return c_proj->forward(gelu(c_fc->forward(x))); }
  std::shared_ptr<Linear> c_fc, c_proj;
};

// x (B, T, C) -> (B, T, C): qkv = c_attn(x) (B, T, 3C) read as (B, T, 3, NH, HS); heads as
// a dimension through causal_attention_qkv (the output comes back as (B, T, C)); c_proj.
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(const GPTConfig& cfg);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<Linear> c_attn, c_proj;
  int64_t heads;
};

// x (B, T, C) -> x + attn(ln_1(x)) -> + mlp(ln_2(.)), with residual dropout.
class Block : public Module {
 public:
  Block(const GPTConfig& cfg);
  // rng: the dropout key of this call (unused when dropout is 0).
  Tensor forward(const Tensor& x, RngKey rng) const;
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
  double dropout;
};

// GPT-2: token + position embeddings, `layers` blocks, final LayerNorm, lm_head tied to wte.
class GPT : public Module {
 public:
  explicit GPT(GPTConfig cfg);
  // idx (B, T) i32/i64 -> logits (B, T, V). Dropout masks are keyed by (dropout_seed, step,
  // block), so a step recomputed (checkpointing) or replayed draws the same masks.
  Tensor forward(const Tensor& idx, uint64_t step = 0) const;
  // Mean cross-entropy of forward(idx) against targets (B, T) -> ().
  Tensor loss(const Tensor& idx, const Tensor& targets, uint64_t step = 0) const;
  // Recompute each block's activations in backward instead of keeping them (checkpoint.h).
  void set_activation_checkpointing(bool on) { checkpoint_blocks_ = on; }
  const GPTConfig& config() const { return cfg_; }

  std::shared_ptr<Embedding> wte, wpe;
  std::vector<std::shared_ptr<Block>> h;
  std::shared_ptr<LayerNorm> ln_f;

 private:
  GPTConfig cfg_;
  bool checkpoint_blocks_ = false;

 public:
  uint64_t dropout_seed = 0;
};

}  // namespace chorus::tensor::nn
