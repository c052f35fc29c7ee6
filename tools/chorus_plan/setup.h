// chorus-plan: what is planned besides the cluster: the model, the training set-up as
// chorus-train's flags say it, and one mesh of it.
#pragma once

#include <cstdint>
#include <string>

#include "model.h"

namespace chorus::plan {

struct Setup {
  ModelShape model;
  int64_t batch = 16;     // global, in sequences
  int micro_batches = 0;  // per replica and step; 0 with micro_batch_size 0: searched per mesh
  int64_t micro_batch_size = 0;
  std::string dtype = "f32";        // f32, or bf16/f16 autocast (f32 parameters, 16-bit compute)
  std::string param_dtype = "f32";  // bf16: 16-bit parameters and gradients, f32 master copies
  int zero = 0;                     // 0 = DDP, 1-3
  bool checkpoint_activations = false;
  std::string schedule = "1f1b";    // gpipe, 1f1b, interleaved
  int chunks = 2;                   // interleaved: chunks per stage
  int64_t bucket_bytes = 25 << 20;  // DDP/ZeRO bucket (parallel/data_parallel.h)
  // The data-parallel reduction overlaps backward (chorus's DDP and ZeRO), or runs after it (a
  // trainer that reduces once backward is done: --no-dp-overlap).
  bool overlap_dp = true;
  // Attention as separate kernels (--unfused-attention): the scores (heads/tp x s x s per
  // sequence) go through memory between the products, the masked softmax and dropout, instead of
  // staying on chip as a fused (flash) attention keeps them. `local` measures its own attention.
  bool unfused_attention = false;
  // A mixture's routing imbalance under expert parallelism: the tokens the busiest ep rank's
  // experts get over the ranks' mean, minus 1 (--routing-imbalance; 0.1: within 10%, as a
  // load-balancing loss keeps a trained router). Negative: estimated for a router not yet
  // balanced (expert_imbalance in step_time.h).
  double routing_imbalance = -1;
};

struct MeshChoice {
  int dp = 1, tp = 1, pp = 1;
  int ep =
      1;  // expert parallelism: groups of ep consecutive dp ranks share each MoE block's experts
  int micro_batches = 1;  // per replica
  int64_t micro_batch_size = 1;
  int chunks = 1;  // interleaved: chunks per stage; else 1
};

}  // namespace chorus::plan
