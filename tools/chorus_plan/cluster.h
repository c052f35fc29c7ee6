// chorus-plan: the cluster a plan is for: GPUs (or, for `local`, ranks) per node, nodes, and
// per device its dense throughput per dtype, memory and memory bandwidth, and the links between
// devices inside a node and across nodes. Presets from the vendors' datasheets
// (docs/PLANNING.md lists them); `local` is this machine, measured (local_probe.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chorus/cost_model.h"

namespace chorus::plan {

// A link's alpha-beta constants: latency per message step and bandwidth per direction.
struct Link {
  double latency_s = 0;
  double bytes_per_s = 0;
};

struct Cluster {
  std::string name;
  std::string source;  // the datasheet, or how `local` was measured
  std::string device;  // "H100 SXM5 80GB", "this CPU, one core per rank"
  int per_node = 8;
  int nodes = 1;
  double f32_flops = 0;   // dense, per device (FLOP/s)
  double bf16_flops = 0;  // dense, per device; f16 the same
  double memory_bytes = 0;
  double hbm_bytes_per_s = 0;
  Link intra;  // NVLink / xGMI / shared memory: per device, per direction
  Link inter;  // the network: per device (one NIC each), per direction
  // The fraction of the dense peak a transformer layer's products reach, and of a link's
  // bandwidth a collective reaches (stated in docs/PLANNING.md; 1 for measured rates).
  double compute_efficiency = 1;
  double link_efficiency = 1;
  // `local`, once a model is known (calibrate_local): the FLOP rate the engine reaches on this
  // model's blocks, forward and backward, by micro-batch size in sequences, which the compute
  // time uses instead of the peak x efficiency; MFU stays against the peak. Empty: not measured.
  std::map<int64_t, double> model_flops_per_s;
  // The same for a tensor-parallel rank, by tp: one block's slice at the sharded shapes (its
  // heads and MLP columns over tp, the LayerNorms and an MoE layer whole), whose rate is the
  // rank's FLOPs (the block's over tp, an MoE layer's experts whole) over its measured time: the
  // smaller products and the replicated work a split block runs reach less than the whole one.
  std::map<int, std::map<int64_t, double>> tp_flops_per_s;
  // And the model's ends, by micro-batch size: seconds of the embeddings, the final LayerNorm,
  // the tied logits and the loss, forward and backward, on one micro-batch; a mesh without tp
  // prices its head by this time instead of its FLOPs (ends_s).
  std::map<int64_t, double> ends_seconds;
  // The same for a tensor-parallel rank, by tp: its share of the vocabulary (V/tp rows of the
  // table, V/tp columns of the logits and of the cross-entropy) and the final LayerNorm whole.
  std::map<int, std::map<int64_t, double>> tp_ends_seconds;
  // And the update: seconds per parameter of the gradient norm and AdamW in f32 (the trainer's
  // finish_step), and seconds per step whatever the count, which the optimizer's time uses
  // instead of its bytes at hbm_bytes_per_s. 0: not measured.
  double optimizer_s_per_element = 0;
  double optimizer_fixed_s = 0;
  // `local`: the cost model the collective selector uses on this host (per algorithm, the
  // constants chorus-tune fitted, else the model's defaults), which prices collectives within the
  // host (GroupCollectives, collectives.h). Null for the presets: their links' forms.
  std::shared_ptr<const CostModel> costs;

  int world() const { return per_node * nodes; }
  double flops(const std::string& dtype) const { return dtype == "f32" ? f32_flops : bf16_flops; }
  // The rate the compute time is priced at, for micro-batches of `micro_batch_size` sequences on
  // a rank of a tp split: the rate measured at that tp (else the whole block's) and size, else at
  // the nearest size measured, else the peak x efficiency.
  double compute_flops(const std::string& dtype, int64_t micro_batch_size = 0, int tp = 1) const;
  // ends_seconds (tp_ends_seconds at tp > 1) at the size nearest `micro_batch_size`; 0 when not
  // measured.
  double ends_s(int64_t micro_batch_size, int tp = 1) const;
};

// 8xh100, 8xh200, 8xmi300x, 8xa100 (and `local`, which local_cluster() measures).
std::vector<std::string> cluster_names();
// The preset `name` with `nodes` nodes; throws PlanError naming the nearest preset.
Cluster cluster_preset(const std::string& name, int nodes);

}  // namespace chorus::plan
