// chorus::parallel — expert parallelism (GShard, Lepikhin et al. 2020; Megatron-Core's MoE): the
// ranks of an ep group each hold E/ep of an MoE layer's experts and send every token to the rank
// of each expert it is routed to.
//
//   tensor::nn::GPT model(cfg);                      // cfg.experts = E
//   model.init(seed);                                // the full model, as one process makes it
//   parallel::expert_parallel(model, ep);            // now this rank's experts of it
//
// Rank r holds experts [r E/ep, (r+1) E/ep), under their names in the whole model
// ("h.1.mlp.experts.5.c_fc.weight"), copied from the full model's; the router is replicated.
// Each rank routes its own tokens exactly as nn::MoE does (top-k, ties, capacity per rank's
// tokens), then per MoE forward:
//   counts    all_to_all of the per-expert token counts (E/ep int64 to each rank), so that every
//             rank knows how many rows it gets from each rank for each of its experts;
//   dispatch  the rows, grouped by destination rank, then expert, then token (exchange_rows);
//   experts   each local expert runs once on its rows from every source rank (source order);
//   combine   the outputs go back the same way (exchange_rows with the counts reversed), and each
//             rank gates its tokens' outputs and adds them in expert order, as nn::MoE does.
// The backward of dispatch is a combine of the gradients and back again: two exchanges per MoE
// layer each way. An expert's gradient sums the contributions of every rank's tokens; a rank
// whose local experts receive no row still takes part in every exchange.
//
// exchange_rows is an uneven all-to-all built from the Communicator's pairwise send_recv (step s
// sends to rank r + s and receives from r - s, both mod ep), after the counts' equal all_to_all:
// it moves exactly the rows routed, where a padded all_to_all moves ep x the largest count (a
// skewed routing would pay for its busiest pair everywhere), at ep - 1 steps like the pairwise
// exchange all_to_all itself runs.
//
// The layer computes; reducing gradients is the trainer's (chorus-train --ep: DDP or ZeRO 1-2
// over dp for the rest, each expert summed, or sharded, over the dp ranks holding it). A block
// recomputed by activation checkpointing re-routes its tokens identically (the same input, the
// same probabilities) and repeats every exchange, on every rank of the group in the same order.
// Checkpoints hold the experts under their whole-model names (checkpoint.h), so they load at any
// ep. Not yet: devices other than the CPU.
//
// Sources apart (the deterministic mode's arithmetic; keep_expert_sources_apart): a local expert
// then runs once per source rank, on leaves of its own that share the expert's storage, so that a
// backward leaves each source's gradient apart: what one process computes for that source's
// micro-batch, where one run over every source's rows sums them in one GEMM. After every backward
// fold_expert_gradients adds them onto the experts' gradients in the order of the global batch,
// as one process accumulating the micro-batches adds them (docs/PARALLELISM.md, "Deterministic
// mode").
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/tensor/nn.h"

namespace chorus::parallel {

// x (S, C) on the CPU, rows grouped by destination: send_rows[p] rows for rank p of `comm`, in
// rank order (sum S). Returns (R, C): recv_rows[p] rows from rank p, in rank order (sum R).
// Every rank of comm calls it with matching counts (rank p's send_rows[me] == my recv_rows[p]).
// Differentiable: the backward sends the gradients back (the counts reversed).
tensor::Tensor exchange_rows(const tensor::Tensor& x, const std::vector<int64_t>& send_rows,
                             const std::vector<int64_t>& recv_rows, Communicator& comm);

// An MoE layer's slice on one rank of an ep group (see above).
class ExpertParallelMoE : public tensor::nn::MoE {
 public:
  // This rank's slice of `full` (its router and experts copied): ep.size() must divide E.
  ExpertParallelMoE(const tensor::nn::GPTConfig& cfg, const tensor::nn::MoE& full,
                    Communicator& ep);
  tensor::Tensor forward(const tensor::Tensor& x,
                         tensor::nn::MoEStats* stats = nullptr) const override;
  int64_t first_expert() const { return first_; }
  // Each local expert runs once per source rank (see "Sources apart" above); every backward
  // through the layer is then followed by a take (fold_expert_gradients). Either way, forwards
  // not yet taken are forgotten.
  void keep_sources_apart(bool on) {
    apart_ = on;
    shadows_.clear();
    pending_.clear();
  }
  bool sources_apart() const { return apart_; }
  // Sources apart, after a backward: the gradients of the per-source leaves it went through,
  // [l * 4 + i][s] for local expert l's parameter i (c_fc.weight, c_fc.bias, c_proj.weight,
  // c_proj.bias) and source s (undefined where s sent the expert no row); those leaves, and any
  // of earlier forwards, are dropped; later forwards' (a pipeline's micro-batches whose backward
  // is still to come) are kept for theirs.
  std::vector<std::vector<tensor::Tensor>> take_source_gradients();

 private:
  Communicator* ep_;
  int64_t first_;
  tensor::nn::GPTConfig cfg_;
  bool apart_ = false;
  // Sources apart: shadows_[l * ep + s] runs local expert l on source s's rows, its parameters
  // rebound at each forward to fresh leaves sharing the expert's storage; pending_[l * ep + s]:
  // the leaves of every forward not yet taken (c_fc.weight, c_fc.bias, c_proj.weight,
  // c_proj.bias), oldest first: a pipeline runs several forwards before their backwards.
  const tensor::nn::MLP& source_expert(int64_t l, int s) const;
  mutable std::vector<std::shared_ptr<tensor::nn::MLP>> shadows_;
  mutable std::vector<std::vector<std::array<tensor::Tensor, 4>>> pending_;
};

// Replaces every MoE block's layer of `model` by this rank's ExpertParallelMoE over `ep`.
// InvalidArgument (on every rank) when the model has no experts or ep does not divide them.
void expert_parallel(tensor::nn::GPT& model, Communicator& ep);

// Sets every expert-parallel layer of `model` to keep its sources apart.
void keep_expert_sources_apart(tensor::nn::GPT& model);

// Sources apart, after every backward, collective over `replicas` (the ranks holding the same
// experts, one per ep group, in dp order): every rank gathers every source's gradient of its
// experts and adds them onto the experts' gradients in the order of the global batch (replica
// 0's ep sources in rank order, then replica 1's, ...), each onto the running sum: every replica
// ends with the same sum, so nothing is reduced after it.
void fold_expert_gradients(tensor::nn::GPT& model, Communicator& replicas);

}  // namespace chorus::parallel
