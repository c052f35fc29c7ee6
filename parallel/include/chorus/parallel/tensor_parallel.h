// chorus::parallel — tensor parallelism (Megatron-LM, Shoeybi et al. 2019): the ranks of a tp
// group each hold a slice of every layer and compute on it together.
//
//   parallel::DeviceMesh mesh(world, parallel::parse_mesh("dp=2,tp=2"));
//   tensor::nn::GPT model(cfg);
//   model.init(seed);                                  // the full model, as one process makes it
//   parallel::tensor_parallel(model, mesh.tp());       // now this rank's slices of it
//   parallel::DistributedDataParallel ddp(model, mesh.dp());
//
// The two conjugate operators (mappings), named as in the paper:
//   f = copy_to_tensor_parallel:      forward identity,   backward all-reduce (sum) over tp
//   g = reduce_from_tensor_parallel:  forward all-reduce, backward identity
// A column-parallel Linear splits the output features: x -> f -> x W_r^T + b_r (this rank's
// columns of the result). A row-parallel Linear splits the input features: x_r -> x_r W_r^T ->
// g -> + b (the full result; the bias added once). Column then row needs no communication in
// between, so one transformer block costs two all-reduces forward (after attention's and the
// MLP's row-parallel projection) and two backward (the f before each column-parallel
// projection), each of B*T*C elements.
//
// On the GPT (tensor_parallel()): attention's fused qkv projection is column-parallel with every
// rank taking the same heads of q, k and v (heads split over tp; heads % tp != 0 is an error
// naming the sizes), its output projection row-parallel; the MLP's c_fc column-parallel (4C/tp
// hidden units each), c_proj row-parallel; the token embedding vocabulary-parallel (rows
// [r*V/tp, (r+1)*V/tp), a lookup outside them contributes zeros, then g), and the tied lm_head
// computes this rank's columns of the logits (after f), which the vocabulary-parallel
// cross-entropy consumes without ever gathering them. A vocabulary that tp does not divide is
// padded to a multiple of tp with zero rows whose logits are masked out (-inf): they change no
// loss and get no gradient. LayerNorms, biases after a row-parallel projection and the position
// embedding are replicated: their gradients come out equal on every tp rank. So is a mixture of
// experts' MoE layer (router and experts, or with expert parallelism this rank's experts): its
// input, after attention's g, is the same on every tp rank, so every tp rank routes alike and
// computes the same output; its gradients, like a LayerNorm's, come out equal on every tp rank
// (the tp ranks of one dp index each run the expert exchange within their own ep group).
//
// Every slice is a copy of the full parameter's rows or columns, so a tp run starts from exactly
// the one-process model; Module::init() on the converted model draws each slice from its full
// logical name and element index (the counter-based RNG), which gives the same values. Dropout
// keys do not depend on the layout (dropout only acts on replicated activations). The results
// equal the one-process run to rounding: a row-parallel product adds its inner sum in tp parts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "chorus/communicator.h"
#include "chorus/tensor/nn.h"

namespace chorus::parallel {

// f: forward identity, backward all-reduce (sum) of the gradient over `tp`.
tensor::Tensor copy_to_tensor_parallel(const tensor::Tensor& x, Communicator& tp);
// g: forward all-reduce (sum) over `tp`, backward identity.
tensor::Tensor reduce_from_tensor_parallel(const tensor::Tensor& x, Communicator& tp);

// Output features split: weight (out/tp, in), bias (out/tp). x (..., in) -> (..., out/tp).
class ColumnParallelLinear : public tensor::nn::Linear {
 public:
  ColumnParallelLinear(int64_t in, int64_t out, Communicator& tp, bool bias = true,
                       double init_std = 0.02);
  // This rank's slice of `full` (its rows [r*out/tp, ...)). With `parts` > 1 the output
  // features are `parts` blocks side by side (attention's fused [q | k | v]), and the rank takes
  // its slice of every block, so its output is again `parts` blocks.
  static std::shared_ptr<ColumnParallelLinear> slice_of(const tensor::nn::Linear& full,
                                                        Communicator& tp, int parts = 1);
  tensor::Tensor forward(const tensor::Tensor& x) const override;
  int parts() const { return parts_; }
  int64_t full_in() const { return in_; }
  int64_t full_out() const { return out_; }
  int tp_rank() const { return tp_->rank(); }
  int tp_size() const { return tp_->size(); }

 protected:
  void reset_parameters(const std::string& prefix, uint64_t seed) override;

 private:
  Communicator* tp_;
  int64_t in_, out_;  // the full layer's sizes
  int parts_ = 1;
};

// Input features split: weight (out, in/tp), bias (out), replicated.
// x (..., in/tp) -> (..., out), the same on every tp rank.
class RowParallelLinear : public tensor::nn::Linear {
 public:
  RowParallelLinear(int64_t in, int64_t out, Communicator& tp, bool bias = true,
                    double init_std = 0.02);
  static std::shared_ptr<RowParallelLinear> slice_of(const tensor::nn::Linear& full,
                                                     Communicator& tp);
  tensor::Tensor forward(const tensor::Tensor& x) const override;
  int64_t full_in() const { return in_; }
  int64_t full_out() const { return out_; }
  int tp_rank() const { return tp_->rank(); }
  int tp_size() const { return tp_->size(); }

 protected:
  void reset_parameters(const std::string& prefix, uint64_t seed) override;

 private:
  Communicator* tp_;
  int64_t in_, out_;
};

// Vocabulary split: weight (V_padded/tp, C) holds rows [vocab_start, vocab_start + rows) of the
// full table (padded to a multiple of tp with zero rows).
class VocabParallelEmbedding : public tensor::nn::Embedding {
 public:
  VocabParallelEmbedding(int64_t vocab, int64_t dim, Communicator& tp);
  static std::shared_ptr<VocabParallelEmbedding> slice_of(const tensor::nn::Embedding& full,
                                                          Communicator& tp);
  // idx (B, T) -> (B, T, C): the rows this rank holds, zeros elsewhere, all-reduced over tp.
  tensor::Tensor forward(const tensor::Tensor& idx) const override;
  // f(x) @ weight^T -> this rank's (..., V_padded/tp) columns of the logits, padding masked.
  tensor::Tensor tied_logits(const tensor::Tensor& x) const override;
  // The vocabulary-parallel cross-entropy: every tp rank returns the full loss.
  tensor::Tensor tied_loss(const tensor::Tensor& logits,
                           const tensor::Tensor& targets) const override;
  int64_t vocab() const { return vocab_; }
  int64_t vocab_start() const { return start_; }
  // Rows of this rank's slice that hold vocabulary (the rest is padding).
  int64_t real_rows() const { return std::max<int64_t>(0, std::min(rows_, vocab_ - start_)); }

 protected:
  void reset_parameters(const std::string& prefix, uint64_t seed) override;

 private:
  Communicator* tp_;
  int64_t vocab_, dim_, start_, rows_;  // rows_: this rank's rows, padding included
};

// Converts a GPT in place into this rank's tensor-parallel slice over `tp` (see above). The
// model must be the full model (as one process has it); `tp` must outlive it. Collective over
// tp only in that every rank must convert alike; no communication happens here. Throws
// InvalidArgument naming the sizes when tp does not divide the heads.
void tensor_parallel(tensor::nn::GPT& model, Communicator& tp);

// The full parameters by name and shape, as the one-process model has them: every slice of a
// tensor-parallel layer gathered from the tp ranks, replicated ones copied (collective over tp;
// every rank gets them all). Checkpoints and comparisons with one process use it.
tensor::nn::NamedTensors gather_tensor_parallel(tensor::nn::Module& model, Communicator& tp);

// Whether parameter `name` of `model` is a tensor-parallel slice (each tp rank holds a different
// part) rather than replicated (every tp rank holds all of it): a global gradient norm counts a
// slice on every rank and a replicated parameter on one.
bool is_tensor_parallel_slice(tensor::nn::Module& model, const std::string& name);

}  // namespace chorus::parallel
