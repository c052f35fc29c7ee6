// chorus-plan: the time of one training step on a mesh, split the way a trace splits it:
// compute, the tensor-parallel all-reduces, the pipeline bubble, point-to-point transfers, the
// expert exchange, the data-parallel reduction's exposed part, and the optimizer. docs/PLANNING.md
// gives each term.
#pragma once

#include "cluster.h"
#include "collectives.h"
#include "model.h"
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

// Expert parallelism's routing imbalance: the expected excess of the most loaded of `ep` ranks
// over the average, as a fraction of the average, for `assignments` token-to-expert choices (the
// ep group's tokens x k) over `experts` experts, E/ep on each rank. The experts' shares of the
// routing are taken as any split equally likely (Dirichlet(1, ..., 1): a router the
// load-balancing loss has not balanced yet, as in chorus-train's runs of tens of steps) and the
// assignments drawn from them, so a rank's count is Dirichlet-multinomial (Mosimann 1962): its
// share's variance (1/ep)(1 - 1/ep)(a + E) / (a (E + 1)), the shares' skew (1/(E + 1)) on top of
// the sampling (1/a). The maximum's excess: sigma sqrt(2/pi) at ep 2 (E|X - mean| in the normal
// limit) and sigma sqrt(2 ln ep) beyond (the maximum of ep normals' leading term). At ep 2 with
// 4 experts: 0.36; chorus-train at 4 blocks x 10 steps, ep 2, 4 experts, 1024 tokens per block:
// the measured excess (the router's counts) 0.37 on average (docs/PLANNING.md). A router that
// training has balanced (shares 1/E) leaves the sampling alone: the plan's price is then high.
double expert_imbalance(double assignments, int ep, int64_t experts);

// The experts' gradients reduced under DDP over the ranks holding the same experts (`g`): the
// trainer all-reduces them after backward (parallel/common/replicas.cc: Replicas::finish_step,
// reduce_experts), one blocking call per tensor and none under backward, so each call's fixed
// cost counts: per expert its MLP's four tensors (c_fc's weight 4C x C and bias 4C, c_proj's
// weight C x 4C and bias C), each priced as its own all-reduce. `expert_elements`: the rank's
// experts' parameters (RankParameters::experts).
double expert_reduction_s(const GroupCollectives& g, const ModelShape& m, double expert_elements,
                          double element_bytes);

}  // namespace chorus::plan
