// chorus-plan: the time of one training step on a mesh, split the way a trace splits it:
// compute, the tensor-parallel all-reduces, the pipeline bubble, point-to-point transfers, the
// expert exchange, the data-parallel reduction's exposed part, and the optimizer. docs/PLANNING.md
// gives each term.
#pragma once

#include "cluster.h"
#include "setup.h"

namespace chorus::plan {

struct StepTime {
  double compute = 0;    // the products, recomputation included, at the cluster's efficiency
  double tp = 0;         // tensor-parallel all-reduces (on the critical path)
  double bubble = 0;     // pipeline fill and drain
  double p2p = 0;        // activations and gradients between stages
  double ep = 0;         // expert parallelism's dispatch and combine (on the critical path)
  double dp = 0;         // the data-parallel reduction (ZeRO's gathers) not hidden by backward
  double dp_total = 0;   // the same, all of it
  double optimizer = 0;  // AdamW over this rank's shard, memory-bound
  double total = 0;
  double tokens_per_s = 0;
  double mfu = 0;  // model FLOPs (no recomputation) per second over the world's dense peak
};

StepTime estimate_step(const Setup& s, const MeshChoice& m, const Cluster& c);

}  // namespace chorus::plan
