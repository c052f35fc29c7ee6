// chorus-plan: the bytes one rank holds at its peak, by kind, for a set-up on a mesh. The model
// states follow what chorus allocates (docs/PARALLELISM.md: DDP's buckets hold the gradients,
// ZeRO shards over dp, a pipeline's last stage keeps a parameter-only copy of the tied table);
// activations follow chorus's engine for f32 (the tensors autograd saves per block) and
// Korthikanti et al. 2022 for 16-bit; docs/PLANNING.md derives each term.
#pragma once

#include "cluster.h"
#include "setup.h"

namespace chorus::plan {

struct MemoryEstimate {
  int stage = 0;  // the pipeline stage whose rank peaks highest
  double parameters = 0, gradients = 0, optimizer = 0, master = 0;
  double activations = 0;               // at the peak: live micro-batches x one's activations
  double activations_full = 0;          // the same without activation checkpointing
  double activations_checkpointed = 0;  // and with it
  double comm_buffers = 0;  // ZeRO-2 staging, ZeRO-3 gathered units, pipeline receive buffers
  double peak = 0;
};

// The bytes of one micro-batch's saved activations on a stage of `blocks` blocks from block
// `first_block` on (which of them are MoE blocks).
double micro_batch_activations(const Setup& s, const MeshChoice& m, int64_t blocks, bool last,
                               bool checkpointed, int64_t first_block = 0);
// Micro-batches whose activations stage `stage` keeps at once.
double live_micro_batches(const Setup& s, const MeshChoice& m, int stage);

// The bytes of a rank of pipeline stage `stage`, and of the stage that peaks highest.
MemoryEstimate estimate_stage_memory(const Setup& s, const MeshChoice& m, int stage);
MemoryEstimate estimate_memory(const Setup& s, const MeshChoice& m);

}  // namespace chorus::plan
