// chorus::parallel — the data-parallel side of a training step behind one interface, whatever
// the stage: DistributedDataParallel with AdamW (zero_stage 0) or a ZeroOptimizer (stages 1-3),
// and, for a mixture of experts whose experts are replicated over fewer ranks than the rest
// (expert parallelism), a second optimizer of the same kind for the experts over their
// expert-data-parallel group. A trainer holds one Replicas and never asks which it is:
//
//   parallel::Replicas replicas(model, mesh, model.named_parameters(), {.zero_stage = 2, ...});
//   for (...) {
//     replicas.set_lr(schedule.at(step));
//     replicas.accumulate(micro_batches, [&](int k) {  // all but the last inside no_sync()
//       Tensor loss = model.loss(x_k, y_k);
//       loss.backward();
//       return loss.item();
//     });  // (a pipeline: engine.forward_backward(..., replicas.pipeline_backward()))
//     const double norm = replicas.finish_step(clip);  // clip, step every optimizer, zero grads
//   }
//
// finish_step does what each composition did by hand, in the same order and with the same
// arithmetic (the deterministic mode's bit equality with one process holds through it):
//   DDP            wait for the buckets, the global norm over the model-parallel group (mp),
//                  clipped; the step (through the GradScaler under f16); zero_grad.
//   DDP + experts  also: the experts' gradients summed over their expert-data-parallel group
//                  (an idle expert's as zeros), the norm over every parameter group once (the
//                  rest on dp rank 0, each expert on the first rank holding it) over the world
//                  (dp when tp = pp = 1); both optimizers step or (f16 overflow) neither.
//   ZeRO           ZeroOptimizer::clip_grad_norm over its shards (then mp), step, zero_grad.
//   ZeRO + experts both wrappers' reductions finished, the norm over both shard sets (world, or
//                  dp; with hybrid sharding the first replica's), then each steps and zeroes in
//                  turn. Hybrid sharding (shard_group G): the rest over runs of G consecutive dp
//                  ranks, each expert over those of its ranks inside one run
//                  (expert_shard_group), replicated across the runs.
// The experts go in one bucket of their own under ZeRO: it is reduced once every expert's
// gradient is final (an idle expert's at the end of backward), so no rank waits inside backward
// for a reduction another rank starts only after its remaining ep exchanges.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/parallel/checkpoint.h"
#include "chorus/parallel/mesh.h"
#include "chorus/parallel/no_sync.h"
#include "chorus/parallel/zero.h"
#include "chorus/tensor/amp.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/optim.h"

namespace chorus::parallel {

using NameFilter = std::function<bool(const std::string& name)>;

struct ReplicasOptions {
  int zero_stage = 0;  // 0: DDP + AdamW; 1-3: ZeroOptimizer of that stage
  tensor::optim::AdamWOptions adamw = {};
  int shard_group = 0;  // ZeRO's hybrid sharding (ZeroOptions::shard_group)
  // The gradient buckets' size (DataParallelOptions / ZeroOptions::bucket_bytes, the first
  // bucket's untouched); 0: the wrapper's default.
  size_t bucket_bytes = 0;
  // The gradients summed over the replicas (the loss already scaled by 1 / global batch) or
  // averaged.
  bool average = false;
  // The parameters this rank's replicas hold (a pipeline stage's own); unset: all.
  NameFilter include = nullptr;
  // A mixture of experts' experts (by name): they may go without a gradient in a backward.
  NameFilter is_expert = nullptr;
  // When set (with is_expert), the experts are replicated over this group instead of dp and
  // reduced (DDP) or sharded (ZeRO 1-2) over it, by an optimizer of their own. Must outlive.
  Communicator* expert_replicas = nullptr;
  // The experts' sources kept apart (keep_expert_sources_apart, the deterministic mode at
  // ep > 1): after_backward folds them; they are never reduced (ZeRO: the experts' optimizer
  // takes its shard of the fold, ZeroOptions::gradients_reduced).
  bool experts_apart = false;
  // The parameters whose squares this rank adds to the global norm, besides the replica rule: a
  // replicated tensor-parallel parameter on tp rank 0 only (grad_norm.h); unset: all.
  NameFilter counted = nullptr;
  // f16's loss scaling (DDP only; must outlive): the norm and the step see scaled gradients.
  tensor::GradScaler* scaler = nullptr;
};

// Hybrid sharding with the experts apart (ReplicasOptions::shard_group and expert_replicas): the
// rest is sharded over runs of `group` consecutive dp ranks; each expert over those of its ranks
// that lie in one such run, replicated across the runs. `members`: the dp ranks of an
// expert-data-parallel group in its rank order. Returns how many of them share a run (the
// experts' ZeroOptions::shard_group: they must be consecutive, every run as many; 1 when each
// is alone), or 0 when they fall unevenly (ep neither divides `group` nor is divided by it, as a
// rule).
int expert_shard_group(const std::vector<int>& members, int group);

class Replicas {
 public:
  // Wraps `model` over mesh.dp() (collective; both must outlive). `params` are the parameters
  // DDP's AdamW updates (a pipeline stage's own: PipelineEngine::parameters()); ZeRO takes them
  // from the model by `include`.
  Replicas(tensor::nn::GPT& model, DeviceMesh& mesh, tensor::nn::NamedTensors params,
           ReplicasOptions options);
  ~Replicas();
  Replicas(const Replicas&) = delete;
  Replicas& operator=(const Replicas&) = delete;

  // "DDP", "ZeRO-2", or with hybrid sharding "ZeRO-2 sharded over groups of 2 (2 replicas)"
  // (with experts apart: ", each expert over 1 of its 2 ranks").
  std::string scheme() const;

  // Accumulation without a reduction, in whichever wrappers hold the gradients.
  struct Quiet {
    std::optional<NoSync> rest, experts;
  };
  [[nodiscard]] Quiet no_sync();
  // After each backward of a step (`last`: its last micro-batch): folds the experts' sources
  // kept apart, and in the deterministic mode at ep 1 with micro-batches reduces the experts onto
  // the first rank's running sum (as DDP folds), so the sum adds the global batch in order.
  void after_backward(bool last);
  // One step's micro-batches k = 0 .. micro_batches-1 without a pipeline: micro_step(k) runs the
  // forward and backward of micro-batch k and returns its loss; all but the last run inside
  // no_sync(), each is followed by after_backward. Returns the losses in order.
  std::vector<double> accumulate(int micro_batches, const std::function<double(int k)>& micro_step);
  // With a pipeline: the hook PipelineEngine::forward_backward calls around each stage's backward
  // (all but a stage's last inside no_sync(), each followed by after_backward).
  std::function<void(bool last, const std::function<void()>& backward)> pipeline_backward();
  // Clips every parameter group's gradients by their global norm (max_norm <= 0: no clipping),
  // steps the optimizer(s) and zeroes the gradients. Returns the norm before clipping (unscaled
  // under f16). Collective over the world.
  double finish_step(double max_norm);

  void set_lr(double lr);

  // Bytes this rank holds for the replicas now: parameters, gradients (DDP's buckets, ZeRO's
  // shards and staging), optimizer state (both optimizers with experts), and the engine's peak;
  // ZeRO's report's kinds.
  using Memory = ZeroOptimizer::Memory;
  Memory memory() const;

  // The gradient reductions of the parameters outside the experts, as a bench reports them: the
  // buckets (DDP's all-reduced, ZeRO's reduce-scattered groups: stage 3's units) in launch order,
  // how many reductions have started and the time spent waiting for them after backward's
  // compute since construction (DDP only: 0 under ZeRO).
  struct Reductions {
    struct Bucket {
      int64_t numel = 0;
      DataType dtype = DataType::kF32;
    };
    std::vector<Bucket> buckets;
    int64_t started = 0;
    double exposed_seconds = 0;
  };
  Reductions reductions() const;

  // Fills the optimizer fields of a checkpoint's state (optimizer or zero, and the experts').
  void bind(CheckpointState& state);
  bool experts_split() const;  // the experts have an optimizer of their own

 private:
  void reduce_experts(bool last);

  tensor::nn::GPT& model_;
  DeviceMesh& mesh_;
  ReplicasOptions o_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<tensor::optim::AdamW> opt_, expert_opt_;
  std::unique_ptr<ZeroOptimizer> zero_, expert_zero_;
};

}  // namespace chorus::parallel
