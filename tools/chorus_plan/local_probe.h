// chorus-plan's `local` cluster: this machine, one rank per core (as chorus-train runs with
// --threads 1), measured. Compute: the f32 GEMM rate of one thread on a 512^3 product (the
// product chorus-train's MFU divides by). Collectives: the cost model the selector uses
// (chorus/cost_model.h: each algorithm's form with the constants chorus-tune fitted on this
// host, else the model's defaults), the fastest algorithm's time (GroupCollectives); the link of
// point-to-point messages: the all-reduce ring's fitted constants. With CHORUS_TUNE=off a short
// probe instead (a memory copy's bandwidth, halved: the shared-memory path copies in and out).
#pragma once

#include <cstdint>
#include <set>

#include "cluster.h"
#include "setup.h"

namespace chorus::plan {

Cluster local_cluster();

// `local` with a model: measures the engine on the model's blocks (a dense one and, for a
// mixture, an MoE one, weighted by their counts), forward and backward in its dtype on one thread,
// at every micro-batch size a mesh of the cluster could use (local_micro_batch_sizes), and prices
// compute at the rate of each mesh's own size (Cluster::model_flops_per_s): the GEMM peak
// overstates what a small model's products, norms, softmaxes and attention reach, and a smaller
// micro-batch reaches less. For each tp that divides the cores and the heads, the same on the
// slice of a block one tp rank runs (Cluster::tp_flops_per_s): a split block's smaller products
// and its replicated LayerNorms reach less again. And the model's ends (embeddings, final
// LayerNorm, tied logits, loss) by their time per micro-batch (Cluster::ends_seconds), and a tp
// rank's share of them (Cluster::tp_ends_seconds), which price a mesh's head; and the update
// (gradient norm and AdamW) per step and per parameter (Cluster::optimizer_fixed_s and
// optimizer_s_per_element, from models of one and three blocks). Every pass is
// timed as the fastest of five while copies of the probe run it on the cluster's other cores (a
// mesh's ranks compute at once).
std::set<int64_t> local_micro_batch_sizes(const Setup& s, int world);
void calibrate_local(Cluster& c, const Setup& s);

}  // namespace chorus::plan
