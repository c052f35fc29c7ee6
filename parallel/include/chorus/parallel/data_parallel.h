// chorus::parallel — data parallelism: every rank holds the whole model, sees its own share of
// each batch, and the gradients are averaged over the ranks while backward runs.
//
//   parallel::DeviceMesh mesh(world, parallel::parse_mesh("dp=4"));
//   parallel::DistributedDataParallel ddp(model, mesh.dp());
//   optim::AdamW opt(model.named_parameters(), {...});
//   ddp.attach(opt);                    // optional: updates start as buckets arrive
//   for (...) {
//     model.loss(x, y).backward();      // gradients reduced, mostly during backward
//     opt.step();
//     opt.zero_grad();
//   }
//
// Wrapping checks that every rank holds the same parameters (names, dtypes, shapes; the first
// difference is named on every rank) and broadcasts rank 0's values.
//
// Buckets. Gradients live in flat buckets (default 25 MiB, the first 1 MiB so that the first
// reduction starts early), filled in the reverse order of registration, which is roughly the
// order backward produces them. Each parameter's gradient is a view into its bucket
// (Tensor::bind_grad): backward accumulates there, the reduction runs in place, nothing is
// copied. When the last gradient of a bucket is final (its grad-ready hook), that bucket's
// all-reduce starts asynchronously, while backward goes on; buckets start strictly in order, so
// every rank issues the same reductions in the same order. When backward ends, buckets whose
// parameters got no gradient are reduced as they are (zeros after zero_grad()) — each such
// parameter is reported once (WARN, and unused_parameters()) — and then:
//   * without attach(), backward waits for every bucket: gradients are complete when it returns;
//   * after attach(optimizer), it returns at once, and optimizer.step() waits for each bucket
//     just before it updates that bucket's parameters (so the last reductions overlap the first
//     updates); GradScaler and clip_grad_norm(optimizer, ...) wait for all first. Anything else
//     that reads gradients calls wait() first.
// The next forward of the wrapped module waits for anything still in flight.
//
// Averaging: the reduced gradient is the mean over ranks (sum with average = false).
//
// Accumulation: inside `auto guard = ddp.no_sync();` backward only accumulates locally; the
// first backward after the guard is gone reduces the accumulated sum.
//
// Deterministic mode (a deterministic group, CHORUS_DETERMINISTIC=1): the ranks' gradients are
// added in rank order, and accumulated micro-batches are folded in the order one process adds
// them: a backward under no_sync() is reduced too, onto rank 0's running sum (the other ranks'
// buckets start again from zero), so the sum is ((T + g_0) + g_1) + ... + g_{N-1} at every
// micro-step. A run at dp = N in which rank r's k-th backward of a step takes micro-batch k N + r
// then equals, bit for bit, one process accumulating the step's micro-batches in that order
// (docs/PARALLELISM.md, "What is bit-identical to what"); with averaging, divided by N at the
// end. The cost: one reduction per micro-step instead of one per step.
//
// Tied weights (the GPT's wte/lm_head) are one parameter, so they are reduced once. The module
// must outlive the wrapper; destroying the wrapper waits for its reductions and unbinds nothing
// (gradients stay where they are, still correct).
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

struct DataParallelOptions {
  size_t bucket_bytes = size_t{25} << 20;
  size_t first_bucket_bytes = size_t{1} << 20;
  bool average = true;               // the mean over ranks; false: the sum
  bool broadcast_parameters = true;  // start every rank from rank 0's values
  // When set, only the parameters it accepts (by name) are checked, broadcast and reduced; the
  // rest belong to someone else (a pipeline stage's wrapper takes its own stage's).
  std::function<bool(const std::string& name)> include = nullptr;
  // Parameters it accepts may go without a gradient in a backward (a mixture of experts' idle
  // experts): no warning for them; unused_parameters() still lists them.
  std::function<bool(const std::string& name)> may_be_unused = nullptr;
};

class DistributedDataParallel {
 public:
  // Collective over `group` (usually mesh.dp()), which must outlive the wrapper, as must module.
  DistributedDataParallel(tensor::nn::Module& module, Communicator& group,
                          DataParallelOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  tensor::nn::Module& module();
  Communicator& group();

  // Lets optimizer.step() wait per bucket instead of backward waiting for all (see above). The
  // optimizer must hold this module's parameters (any subset, any order).
  void attach(tensor::optim::Optimizer& optimizer);
  // Waits until every reduction started so far is done (rethrows a failed one's error).
  void wait();

  // While the returned guard lives, backward does not reduce (gradient accumulation).
  using NoSync = parallel::NoSync;  // no_sync.h
  [[nodiscard]] NoSync no_sync();

  struct BucketInfo {
    std::vector<std::string> params;  // in layout order
    DataType dtype = DataType::kF32;
    int64_t numel = 0;
    size_t bytes = 0;
  };
  std::vector<BucketInfo> buckets() const;
  // Parameters that got no gradient in some backward so far.
  std::vector<std::string> unused_parameters() const;

  struct Stats {
    int64_t reductions = 0;      // bucket all-reduces started
    double exposed_seconds = 0;  // time spent waiting for them after backward's compute
  };
  Stats stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus::parallel
