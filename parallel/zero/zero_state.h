// Internal: the state ZeroOptimizer's files share (zero.cc: construction, step, state dicts;
// gradient_flow.cc: gradients to shards; parameter_flow.cc: stage 3's gathered parameters).
//
// Vocabulary
//   group   a bucket (stages 1-2) or a unit (stage 3): one flat buffer of one dtype holding
//           several parameters, padded to a multiple of the N ranks.
//   shard   rank r's [lo, hi) of a group: numel / N elements. The rank owns the optimizer state
//           of those elements (and at stages 2-3 their gradient, at stage 3 their values).
//   piece   the part of one parameter inside this rank's shard: what the shard optimizer (an
//           ordinary AdamW) sees as a parameter, a 1-D view.
//   shard group   the N dp ranks a group is cut over (all of dp but with hybrid sharding);
//   replica group the ranks of the other shard groups holding the same shard index.
#pragma once

#include <optional>

#include "common/bucket_readiness.h"
#include "common/tensor_comm.h"

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "chorus/parallel/zero.h"
#include "common/flat_layout.h"

namespace chorus::parallel {

using tensor::Tensor;

struct ZeroGroup {
  std::string name;
  DataType dtype = DataType::kF32;
  int64_t numel = 0;       // padded
  int64_t lo = 0, hi = 0;  // this rank's shard
  std::vector<FlatSlot> slots;
  tensor::nn::Module* module = nullptr;  // stage 3: the unit's module (null for the root unit)

  Tensor flat_param;             // numel; stage 3: storage released while not gathered
  Tensor shard_param;            // stage 3: the persistent own shard (hi - lo)
  Tensor flat_grad;              // stage 1: persistent, the parameters' gradients bound into it;
                                 // stage 2: staging, allocated per backward; stage 3: per backward
  Tensor shard_grad;             // stages 2-3: the own shard's reduced gradient (hi - lo)
  bool shard_grad_fresh = true;  // the next reduce-scatter writes shard_grad instead of adding
  // Folding, stages 2-3: every dp rank's copy of this shard, received by an all-to-all (numel
  // times the replicas), added to shard_grad in dp rank order once it is in; hybrid: what goes
  // out (the buffer once per replica group).
  Tensor inbox, outbox;

  // The step in progress.
  Work reduce;         // its reduce-scatter
  Tensor reduce_into;  // where that reduce-scatter writes, when it is added to shard_grad later
  bool reducing = false;
  bool across = false;  // hybrid, not folding: the shard is all-reduced over the replica group
                        // once the reduce-scatter is done

  // Stage 3.
  enum class Params { kReleased, kGathering, kGathered } params = Params::kReleased;
  Work gather;
  bool grads_bound = false;  // flat_grad allocated and bound for the backward in progress
};

struct ZeroOptimizer::Impl {
  tensor::nn::Module* model = nullptr;
  Communicator* dp = nullptr;
  // The parameters' device, and the shard group's collectives in the engine's order on it
  // (common/tensor_comm.h): bucket reductions and gathers beside the compute, and those needed
  // at once.
  tensor::Device device;
  // Hybrid sharding: the shard group and the replica group, split from dp (declared before the
  // collectives over them, which go first).
  std::optional<Communicator> shard_comm, replica_comm;
  std::optional<TensorComm> beside, inline_;  // over the shard group
  ZeroOptions options;
  // The shard group (its `ranks`, this one's `rank` in it) and, hybrid, the collectives over the
  // replica group and over the whole dp group (folding).
  int ranks = 1, rank = 0;
  int dp_ranks = 1, replicas = 1, replica = 0;
  Communicator* shard = nullptr;  // dp itself, or shard_comm
  std::optional<TensorComm> across, dp_beside;
  std::vector<std::string> names;  // parameters that require grad, registration order
  std::vector<Tensor> params;
  std::vector<ZeroGroup> groups;
  std::vector<std::pair<size_t, size_t>> where;  // per parameter: (group, slot)
  // The step in progress: which groups are final and launched (common/bucket_readiness.h).
  std::optional<BucketReadiness> readiness;
  int no_sync_depth = 0;
  // A deterministic dp group folds the micro-batches' gradients in the order one process adds
  // them (gradient_flow.cc): stage 1 onto rank 0 under no_sync(), stages 2-3 onto each shard's
  // owner; `intermediate` marks a stage-1 backward under no_sync().
  bool fold = false, intermediate = false;
  bool averaged = false;  // stages 2-3 folding: the step's sum has been divided by the ranks
  bool taken = false;     // gradients_reduced, stage 2: the step's shards copied out of them
  std::unique_ptr<tensor::optim::AdamW> optimizer;  // over this rank's pieces
  std::vector<int> grad_hooks;
  std::vector<std::pair<tensor::nn::Module*, int>> module_hooks;

  // Stage 3: unit order in forward (indices into groups; the root unit is not among them).
  std::vector<size_t> forward_units;
  size_t root_unit = SIZE_MAX;
  bool in_backward_phase = false;  // between the model's forward and the next one

  // gradient_flow.cc
  void install_gradient_hooks();
  void on_grad_ready(size_t i, Tensor& grad);
  void open_step();
  void group_final(size_t g);
  void unused_parameter(size_t i);
  void launch(size_t g);
  void finish_backward();
  void wait_reduce(size_t g);
  void wait_all_reduces();
  void poll_reduces();
  // Waits for every reduction and, stages 2-3 folding with averaging, divides the step's sum by
  // the ranks (once): the gradients as step() and clip_grad_norm() read them. gradients_reduced,
  // stage 2: copies this rank's shard out of the parameters' gradients (once) instead.
  void finish_gradients();
  void take_reduced_shards();

  // parameter_flow.cc (stage 3)
  void install_unit_hooks();
  void prefetch(size_t g);
  void ensure_gathered(size_t g);
  void release(size_t g);
  void prepare_backward(size_t g);
  // A fresh zeroed gradient buffer for unit g, its parameters' gradients bound into it.
  void bind_unit_grads(size_t g);
  size_t unit_of(const tensor::nn::Module& m) const;
};

}  // namespace chorus::parallel
