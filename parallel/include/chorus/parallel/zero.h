// chorus::parallel — ZeRO (Rajbhandari et al., 2020): data parallelism whose replicas share out
// the optimizer state (stage 1), the gradients (stage 2) and the parameters (stage 3) instead of
// each holding all of them.
//
//   parallel::ZeroOptimizer zero(model, mesh.dp(), {.stage = 2, .adamw = {.lr = 3e-4}});
//   for (...) {
//     model.loss(x, y).backward();   // gradients reduce-scattered as they are produced
//     zero.step();                   // each rank updates its shard; stages 1-2 all-gather
//     zero.zero_grad();
//   }
//
// Layout. Parameters (in reverse registration order, as backward produces their gradients) are
// laid out in flat buckets (stages 1-2: ~25 MiB each, the first 1 MiB) or units (stage 3: one per
// module named in `units`, by default every GPT block, plus a root unit for what is left: the
// embeddings, the final LayerNorm). Each bucket or unit is padded to a multiple of the ranks and
// cut into equal shards; rank r owns shard r of each: it keeps the optimizer state (AdamW's m, v,
// and an f32 master copy for 16-bit parameters) of those elements only and updates them.
// shard_layout() lists, per parameter, where it lies and which part of it this rank owns.
//
// Per step, N ranks, P parameter elements (bytes: multiply by the element size):
//   stage 1  parameters full, gradients full, optimizer state P/N.
//            backward: each gradient bucket is reduce-scattered when its last gradient is final
//            (P sent and received per rank, like half an all-reduce); step: update the own
//            shard, all-gather the parameters (P again). Same volume as DDP's all-reduce.
//   stage 2  + gradients P/N: a finished bucket's gradients are copied into a staging buffer,
//            dropped, reduce-scattered into this rank's shard; the staging buffer goes once its
//            reduce-scatter is done. Same volume as stage 1.
//   stage 3  + parameters P/N: a unit's parameters are all-gathered before its forward (the next
//            unit's gather starts at once: prefetch), released after it, gathered again before
//            its backward (the previous unit prefetched), and its gradients reduce-scattered as
//            soon as they are final; no all-gather after the step. Volume 3P per step (two
//            gathers and a reduce-scatter) against 2P.
// Gradient accumulation: stage 1 follows DDP (inside no_sync() backward accumulates locally, the
// next backward reduces the sum; in the deterministic mode it reduces onto rank 0); stages 2 and
// 3 keep only a shard of the gradient, so every backward is reduced and the reduced shards are
// added up (no_sync() changes nothing there).
//
// With a deterministic communicator (CHORUS_DETERMINISTIC=1) every stage folds the gradients
// the way one process accumulating the same micro-batches adds them: micro-step k's
// contributions of ranks 0..N-1 are added, in rank order, onto the running sum (one backward's
// whole gradient at a time, as the engine adds them), the sum divided by N at the end when
// averaging. AdamW is element-wise and the gradient norm exact (tensor/optim.h), so a ZeRO run
// at dp = N equals, bit for bit, one process accumulating micro-batch k*N + r of the step as
// rank r's k-th (docs/PARALLELISM.md, "What is bit-identical to what"). Stage 1 keeps the
// running sum on rank 0 under no_sync() (as DDP does); stages 2-3 on each shard's owner, which
// receives every rank's copy of its shard by an all-to-all instead of a reduce-scatter (the same
// traffic; one more buffer of the group's size while it is in flight).
//
// Hybrid sharding (FSDP's HYBRID_SHARD, ZeRO++'s hpZ): with ZeroOptions::shard_group = G (a
// divisor of dp's size D; kHostGroup: the ranks of one host), the shards are cut over groups of
// G consecutive dp ranks (group g = dp ranks gG .. gG+G-1) and every group holds a replica of
// them: shard i of a group lives on the R = D/G ranks with in-group index i, its "replica
// group". Every table above holds with N = G; the gradients are reduce-scattered inside the
// group and each shard then all-reduced over its replica group (2 S (R-1)/R elements per rank, S
// the shard), stage 3's gathers and stages 1-2's parameter all-gathers stay inside the group.
// G = D is plain ZeRO; G = 1 replicates everything (DDP's traffic, a local optimizer).
// Deterministic mode, which must fold every rank's contribution in dp rank order 0..D-1 (a sum
// inside the group first would change the bits): stage 1 reduces over the whole dp group (onto
// rank 0 under no_sync(), an all-reduce on the last backward); stages 2-3 send each rank's copy
// of shard i to every rank holding shard i by one all-to-all over dp (R copies of the buffer
// go out, D shards come in), and each adds the D copies in dp rank order, every replica the
// same bits.
//
// Mixed precision: under autocast parameters stay f32 (nothing changes); a model converted to
// 16 bits (Module::to(kBF16)) keeps 16-bit parameters and gradients, and f32 master weights of
// the own shard in the optimizer. Activation checkpointing works with every stage (stage 3
// gathers a unit again for its recomputation).
//
// The model must be wrapped on every rank of `dp` alike (checked: the first difference is named
// on every rank) and outlive the optimizer; rank 0's parameter values are broadcast first.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/parallel/no_sync.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/optim.h"

namespace chorus::parallel {

struct ZeroOptions {
  int stage = 1;  // 1, 2 or 3
  tensor::optim::AdamWOptions adamw = {};
  // Stages 1-2: the buckets gradients are reduce-scattered in (as in DataParallelOptions).
  size_t bucket_bytes = size_t{25} << 20;
  size_t first_bucket_bytes = size_t{1} << 20;
  // Stage 3: the module paths gathered as one unit each, in forward order ("h.0", "h.1", ...).
  // Empty: every block of a GPT (modules named "h.<i>"), or failing that every direct child.
  std::vector<std::string> units = {};
  bool prefetch = true;  // stage 3: gather the next unit while this one computes
  bool broadcast_parameters = true;
  bool average = true;  // the gradient is the mean over ranks; false: the sum
  // Stages 1-2: when set, only the parameters it accepts (by name) are sharded and updated (a
  // pipeline stage's own); stage 3 refuses it.
  std::function<bool(const std::string& name)> include = nullptr;
  // Hybrid sharding (above): the shards are cut over groups of this many consecutive dp ranks,
  // replicated across the groups. 0: all of dp (plain ZeRO); kHostGroup: the dp ranks that share
  // a host (Communicator::host_of), which must be consecutive and as many on every host.
  int shard_group = 0;
  static constexpr int kHostGroup = -1;
  // Parameters it accepts may go without a gradient in a backward (a mixture of experts' idle
  // experts): reduced as zeros without a warning (as in DataParallelOptions).
  std::function<bool(const std::string& name)> may_be_unused = nullptr;
  // Stages 1-2: the gradients arrive reduced, the same bits on every rank (a mixture of experts'
  // experts with their sources apart: fold_expert_gradients sums every source in the global
  // batch's order onto them after each backward, expert_parallel.h). Nothing reduces them
  // again: step() and clip_grad_norm() read this rank's shard of them (stage 1: in the flat
  // buffer they are bound into; stage 2: copied into the shard, the full gradients dropped).
  // Needs average false.
  bool gradients_reduced = false;
};

// The size of the shard groups kHostGroup means over `dp`: the number of dp ranks on each host.
// InvalidArgument when the ranks of a host are not consecutive in dp or the hosts hold different
// numbers of them (naming the host of every dp rank).
int host_shard_group(Communicator& dp);

class ZeroOptimizer {
 public:
  // Collective over `dp`, which must outlive the optimizer, as must `model`.
  ZeroOptimizer(tensor::nn::Module& model, Communicator& dp, ZeroOptions options);
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  int stage() const;
  // The shard group (ZeroOptions::shard_group resolved): its size, and which replica of the
  // shards this rank's group is (dp rank / size).
  int shard_group_size() const;
  int replica() const;
  // The AdamW that updates this rank's shard: its parameters are the pieces (1-D views, named
  // as the parameters they belong to) and its state is theirs (checkpoints read and write it).
  tensor::optim::AdamW& shard_optimizer();
  // Waits for the gradients, updates this rank's shard with AdamW, and (stages 1-2) all-gathers
  // the parameters. Collective.
  void step();
  // Resets the gradients for the next accumulation (the shards and, stage 1, the full buckets).
  void zero_grad();
  double lr() const;
  void set_lr(double lr);
  int64_t step_count() const;
  // Clips the reduced gradients to a global L2 norm of at most max_norm (the shards' squares
  // summed over the shard group) and returns the norm before clipping, as optim::clip_grad_norm
  // does for one process. Call between backward and step(). Collective. With tensor or pipeline
  // parallelism, the sum goes on over `model_parallel` (mesh.mp()), counting the parameters
  // `counted` accepts (grad_norm.h explains both).
  double clip_grad_norm(double max_norm, Communicator* model_parallel = nullptr,
                        const std::function<bool(const std::string&)>& counted = {});

  // Stage 1: while the guard lives backward accumulates locally (as DDP's no_sync); stages 2-3:
  // no effect (see above).
  using NoSync = parallel::NoSync;  // no_sync.h
  [[nodiscard]] NoSync no_sync();

  // Full tensors by name, gathered from the shards (collective over dp): the parameters, and
  // the optimizer state ("<param>.exp_avg", "<param>.exp_avg_sq", "step"), as an unsharded
  // AdamW names them.
  tensor::nn::NamedTensors state_dict();
  tensor::nn::NamedTensors optimizer_state_dict();

  // Where each parameter lies and what this rank owns of it.
  struct ShardInfo {
    std::string name;
    tensor::Shape shape;
    DataType dtype = DataType::kF32;
    int group = 0;       // bucket (stages 1-2) or unit (stage 3) index
    int64_t offset = 0;  // first element inside the group's flat buffer
    int64_t numel = 0;
    int64_t owned_begin = 0;  // this rank's elements of the parameter: [begin, end) in its
    int64_t owned_end = 0;    // own row-major order (empty when begin == end)
  };
  std::vector<ShardInfo> shard_layout() const;
  struct GroupInfo {
    std::string name;  // "bucket 0", or the unit's module path ("" for the root unit)
    DataType dtype = DataType::kF32;
    int64_t numel = 0;                       // padded, a multiple of the ranks
    int64_t shard_begin = 0, shard_end = 0;  // this rank's shard
  };
  std::vector<GroupInfo> groups() const;

  // Bytes this rank holds, by kind, now (parameters: the ones gathered at the moment included),
  // and the engine's peak (tensor::memory_stats) since construction or reset_peak().
  struct Memory {
    int64_t parameter_bytes = 0;
    int64_t gradient_bytes = 0;
    int64_t optimizer_bytes = 0;
    int64_t peak_bytes = 0;
  };
  Memory memory() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus::parallel
