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
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "chorus/tensor/ops.h"
#include "chorus/tensor/tensor.h"

namespace chorus::tensor::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module;
// Runs before a module's forward (its inputs are not passed: hooks prepare state, e.g. gather a
// sharded module's parameters).
using ForwardPreHook = std::function<void(const Module& module)>;
// Runs after a module's forward with its output, which it may replace (e.g. by an identity op
// whose backward prepares the module's backward).
using ForwardHook = std::function<void(const Module& module, Tensor& output)>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;
  // This module ("") and every descendant ("h.0", "h.0.attn", ...), depth-first in registration
  // order: the order named_parameters() visits them.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // The module at a dotted path ("h.1.mlp.c_fc"); InvalidArgument when there is none.
  Module& module_at(const std::string& path);
  // Resets every parameter's gradient (Tensor::zero_grad: bound gradients are zeroed in place,
  // the others dropped so that the next backward allocates fresh ones).
  void zero_grad();
  // Initialises every parameter from the counter-based RNG (see reset_parameters).
  void init(uint64_t seed);
  // Converts every parameter to `dtype` in place (f32, f64, bf16, f16): the same tensors (names,
  // hooks, requires_grad) with converted values; gradients are dropped. Modules compute in the
  // dtype of their input, so a 16-bit model is run on f32 inputs (its weights are widened per
  // call, gradients come back in the weights' dtype) and an f64 one on f64 inputs.
  Module& to(DataType dtype);
  // Moves every parameter to `device` ("cuda:0", Device::cpu()) in place: the same tensors with
  // their values copied there; gradients are dropped. All or nothing: when a copy fails (a
  // device this process cannot use, InvalidArgument saying why) no parameter has moved. Inputs
  // must then be on that device too (an op's tensors are on one device). Move the model before
  // building its optimizer, whose state goes where the parameters are.
  Module& to(Device device);

  // Replaces the descendant at `path` by `module` (for example a Linear by a tensor-parallel
  // one): the parent's member and its registration both point at the new module from now on.
  // The replacement must have the member's type (a subclass of it); InvalidArgument otherwise.
  void replace_module(const std::string& path, std::shared_ptr<Module> module);

  // Forward hooks: every module's forward runs its pre-hooks, then the computation, then its
  // hooks on the output. Returns a handle for remove_hook.
  int add_forward_pre_hook(ForwardPreHook hook);
  int add_forward_hook(ForwardHook hook);
  void remove_hook(int handle);

  // Checkpoint I/O: copies values by name; shapes and names must match exactly.
  NamedTensors state_dict() const { return named_parameters(); }
  void load_state_dict(const NamedTensors& state);

 protected:
  // Registers a parameter (requires_grad set) and returns it.
  Tensor register_parameter(std::string name, Tensor value);
  // Registers `module` as child `name` and stores it in `member`, which replace_module() updates
  // (member must live as long as this module: a data member, or an element of a container that
  // is never resized afterwards).
  template <class M>
  void register_module(std::string name, std::shared_ptr<M>& member, std::shared_ptr<M> module) {
    member = module;
    std::shared_ptr<M>* slot = &member;
    add_child(std::move(name), std::move(module), type_name_of<M>(),
              [slot](const std::shared_ptr<Module>& m) {
                auto typed = std::dynamic_pointer_cast<M>(m);
                if (!typed) return false;
                *slot = std::move(typed);
                return true;
              });
  }
  // Fills this module's own parameters; `prefix` is its full name ("h.0.attn."). The default:
  // matrices ~ N(0, 0.02), vectors named "bias" zeros, other vectors ones.
  virtual void reset_parameters(const std::string& prefix, uint64_t seed);
  // Runs `body` (the forward's computation) between this module's hooks. Every forward calls it.
  template <class F>
  Tensor hooked(F&& body) const {
    if (pre_hooks_.empty() && hooks_.empty()) return body();
    for (const auto& [id, hook] : pre_hooks_) hook(*this);
    Tensor out = body();
    for (const auto& [id, hook] : hooks_) hook(*this, out);
    return out;
  }

 private:
  using Assign = std::function<bool(const std::shared_ptr<Module>&)>;
  struct Child {
    std::string name;
    std::shared_ptr<Module> module;
    std::string type;  // the member's type, for error messages
    Assign assign;
  };
  template <class M>
  static std::string type_name_of() {
    return demangle(typeid(M).name());
  }
  static std::string demangle(const char* name);
  void add_child(std::string name, std::shared_ptr<Module> module, std::string type, Assign assign);
  void collect(const std::string& prefix, NamedTensors& out) const;
  void collect_modules(const std::string& prefix,
                       std::vector<std::pair<std::string, Module*>>& out);
  void init_recursive(const std::string& prefix, uint64_t seed);
  NamedTensors params_;
  std::vector<Child> children_;
  std::vector<std::pair<int, ForwardPreHook>> pre_hooks_;
  std::vector<std::pair<int, ForwardHook>> hooks_;
  int next_hook_ = 1;
};

// x (..., in) -> (..., out)
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias = true, double init_std = 0.02);
  // Subclasses (tensor-parallel linears) override it and run it through hooked() too.
  virtual Tensor forward(const Tensor& x) const;
  Tensor weight;  // (out, in)
  Tensor bias;    // (out) or undefined
  // The standard deviation reset_parameters() draws the weight with.
  double init_std() const { return init_std_; }

 protected:
  void reset_parameters(const std::string& prefix, uint64_t seed) override;

 private:
  double init_std_;
};

// idx (B, T) -> (B, T, C)
class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim);
  virtual Tensor forward(const Tensor& idx) const;
  // The lm_head tied to this table: x (..., C) -> logits (..., num) = x @ weight^T. A
  // vocabulary-parallel table (parallel/) returns this rank's columns of the logits.
  virtual Tensor tied_logits(const Tensor& x) const;
  // Mean cross-entropy of tied_logits' output, viewed (N, num), against targets (N).
  virtual Tensor tied_loss(const Tensor& logits, const Tensor& targets) const;
  Tensor weight;  // (num, dim)
};

// x (..., C) -> (..., C)
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim);
  virtual Tensor forward(const Tensor& x) const;
  Tensor weight, bias;  // (C)
};

struct GPTConfig {
  int64_t vocab = 256;
  int64_t context = 128;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t width = 128;
  double dropout = 0.0;
  // Mixture of experts (class MoE). experts == 0: every block has the dense MLP. Otherwise block
  // i's MLP is an MoE of `experts` MLPs when i % moe_every == moe_every - 1 (moe_every 1: every
  // block; 2: every other block, 1, 3, ...), each token going to its top_k (1 or 2) experts.
  int64_t experts = 0;
  int64_t top_k = 1;
  int64_t moe_every = 1;
  // An expert takes at most ceil(capacity_factor * tokens * top_k / experts) tokens per forward,
  // the rest of its tokens are dropped (their output from that expert is zero); 0: dropless.
  double capacity_factor = 0.0;
  // GPT::loss adds aux_loss_coef * (load-balancing loss) + z_loss_coef * (router z-loss) of every
  // MoE block (Megatron-Core's defaults: 1e-2 and 1e-3).
  double aux_loss_coef = 1e-2;
  double z_loss_coef = 1e-3;
  // Whether block i's MLP is an MoE.
  bool moe_block(int64_t i) const { return experts > 0 && i % moe_every == moe_every - 1; }
};

// x (B, T, C) -> (B, T, C): c_fc (C -> 4C), gelu, c_proj (4C -> C)
class MLP : public Module {
 public:
  MLP(const GPTConfig& cfg);
  virtual Tensor forward(const Tensor& x) const;
  std::shared_ptr<Linear> c_fc, c_proj;
};

// The auxiliary losses of one MoE forward, unweighted, and what its routing did.
struct MoEStats {
  Tensor load_balance;          // () E * sum_e f_e P_e (Switch / GShard): 1 when routing is uniform
  Tensor z_loss;                // () mean over tokens of logsumexp(router logits)^2
  std::vector<int64_t> routed;  // (E) assignments each expert was chosen for (top-k, pre-capacity)
  std::vector<int64_t> kept;    // (E) assignments each expert computed (after capacity)
  int64_t dropped = 0;          // assignments over capacity
};

// x (B, T, C) -> (B, T, C): a mixture of `experts` MLPs. Per token n (x viewed (N, C)):
//   p = softmax(router(x[n])) (E; the router is a Linear without bias, "router.weight"),
//   the top_k experts by p (ties to the lower index), each with gate p[e] (not renormalised),
//   out[n] = sum over its kept experts e, in increasing e, of p[e] * experts[e](x[n]).
// Capacity (capacity_factor > 0): an expert keeps at most ceil(cf * N * top_k / E) assignments,
// first choices of every token before second choices, tokens in order; the rest are dropped.
// Every expert computes its tokens as one batch and adds them into the output one expert after
// the other (index_add_rows, fixed order): the same bits at any thread count. An expert with no
// token does not run (its parameters get no gradient from this forward). With E = 1 the gate is
// 1 exactly and the layer is the dense MLP.
// Where one forward's tokens go (MoE::route): expert e computes rows tokens[e] of x (N, C),
// ascending.
struct MoERouting {
  std::vector<std::vector<int64_t>> tokens;  // (E)
  std::vector<int64_t> routed, kept;         // as in MoEStats
  int64_t dropped = 0;
};

class MoE : public Module {
 public:
  MoE(const GPTConfig& cfg);
  // stats (when given) receives the auxiliary losses and the routing counts.
  virtual Tensor forward(const Tensor& x, MoEStats* stats = nullptr) const;
  // The routing of router probabilities p (N, E) (top_k, ties, capacity: as above), on the host.
  MoERouting route(const Tensor& probs) const;
  // Fills stats (when given) from the router's logits and probabilities (N, E) and the routing.
  void losses(const Tensor& logits, const Tensor& probs, MoERouting routing, MoEStats* stats) const;
  // All experts, E (`experts` holds those of this module: all of them here, a slice in an
  // expert-parallel subclass).
  int64_t num_experts() const { return num_experts_; }
  std::shared_ptr<Linear> router;             // (C -> E), no bias
  std::vector<std::shared_ptr<MLP>> experts;  // "experts.0" ...
  int64_t top_k;
  double capacity_factor;

 protected:
  // The router and experts [first, first + count) only, registered under their names in the
  // whole layer ("experts.<first>" ...), so that checkpoints and initialisation see one layer.
  MoE(const GPTConfig& cfg, int64_t first, int64_t count);

 private:
  int64_t num_experts_;
};

// x (B, T, C) -> (B, T, C): qkv = c_attn(x) (B, T, 3C) read as (B, T, 3, NH, HS); heads as
// a dimension through causal_attention_qkv (the output comes back as (B, T, C)); c_proj.
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(const GPTConfig& cfg);
  virtual Tensor forward(const Tensor& x) const;
  std::shared_ptr<Linear> c_attn, c_proj;
  int64_t heads;
};

// x (B, T, C) -> x + attn(ln_1(x)) -> + mlp(ln_2(.)), with residual dropout. The MLP is a
// dense MLP (`mlp`) or, for an MoE block (GPTConfig::moe_block), an MoE (`moe`, registered
// under the same name "mlp": its parameters are "h.N.mlp.router.weight",
// "h.N.mlp.experts.E.c_fc.weight", ...); the other pointer is null.
class Block : public Module {
 public:
  Block(const GPTConfig& cfg, bool moe_block = false);
  // rng: the dropout key of this call (unused when dropout is 0). aux (when given, for an MoE
  // block): receives the block's weighted auxiliary loss, aux_loss_coef * load balance +
  // z_loss_coef * z-loss, a () tensor.
  virtual Tensor forward(const Tensor& x, RngKey rng, std::vector<Tensor>* aux = nullptr) const;
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
  std::shared_ptr<MoE> moe;
  double dropout;
  double aux_loss_coef = 0, z_loss_coef = 0;
};

// GPT-2: token + position embeddings, `layers` blocks, final LayerNorm, lm_head tied to wte.
class GPT : public Module {
 public:
  explicit GPT(GPTConfig cfg);
  // idx (B, T) i32/i64 -> logits (B, T, V). Dropout masks are keyed by (dropout_seed, step,
  // block), so a step recomputed (checkpointing) or replayed draws the same masks.
  // forward = head(blocks(embed(idx), 0, layers)), between the GPT's own hooks.
  Tensor forward(const Tensor& idx, uint64_t step = 0) const;
  // The slices a pipeline stage runs (no GPT-level hooks; each block runs its own):
  // idx (B, T) -> token + position embeddings (B, T, C);
  Tensor embed(const Tensor& idx) const;
  // x (B, T, C) through blocks [begin, end) -> (B, T, C), each checkpointed when enabled;
  // aux (when given) receives each MoE block's weighted auxiliary loss (Block::forward);
  Tensor blocks(const Tensor& x, int64_t begin, int64_t end, uint64_t step = 0,
                std::vector<Tensor>* aux = nullptr) const;
  // x (B, T, C) -> ln_f, then the lm_head tied to wte -> logits (B, T, V).
  Tensor head(const Tensor& x) const;
  // Mean cross-entropy of forward(idx) against targets (B, T) -> (), plus every MoE block's
  // weighted auxiliary loss (Block::forward), added in block order.
  Tensor loss(const Tensor& idx, const Tensor& targets, uint64_t step = 0) const;
  // Recompute each block's activations in backward instead of keeping them (checkpoint.h). An
  // MoE block's auxiliary loss is recomputed with it (its routing is the forward's: the same
  // input gives the same router probabilities), so its gradient flows as without checkpointing.
  void set_activation_checkpointing(bool on);
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
