// chorus-train's command line: what the flags say, and every combination that cannot work
// refused before any rank starts work.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace chorus::train {

struct Options {
  // The mesh; 0 = choose (docs: a proposal from the world size, printed with its reason).
  int dp = 0, tp = 0, pp = 0;
  int ep = 1;                        // expert-parallel ranks, carved out of dp (needs --experts)
  int zero = 0;                      // 0 = DDP, 1-3 = ZeRO stage
  int zero_group = 0;                // ZeRO's shard group: 0 = all of dp, -1 = host, else size
  std::string schedule = "1f1b";     // gpipe, 1f1b, interleaved
  int chunks = 0;                    // interleaved: chunks per stage (0: 2)
  std::string balance = "measured";  // the stages' cut: measured or uniform (PipelineOptions)
  int micro_batches = 0;             // per step and replica (0: pp, or 1 without a pipeline)
  // The model.
  int64_t layers = 4, width = 128, heads = 4, context = 64, vocab = 256;
  // Mixture of experts (tensor/nn.h: GPTConfig): 0 experts = the dense MLP everywhere.
  int64_t experts = 0, top_k = 1, moe_every = 1;
  double capacity_factor = 0;  // 0: dropless
  double aux_loss_coef = 1e-2, z_loss_coef = 1e-3;
  // Training.
  int64_t batch = 16;  // global: split over dp and the micro-batches
  int64_t steps = 50;
  int64_t lr_steps = 0;  // the schedule's length (0: --steps), so a run can stop and resume
  double lr = 1e-3;
  double min_lr = 0;    // 0: lr / 10
  int64_t warmup = -1;  // -1: min(100, steps / 10)
  double clip = 1.0;    // 0: no clipping
  double weight_decay = 0.1;
  std::string dtype = "f32";  // f32, bf16 (autocast), f16 (autocast and loss scaling)
  bool checkpoint_activations = false;
  bool deterministic = false;
  uint64_t seed = 1234;
  std::string data;  // a file of bytes; empty: the built-in corpus
  // Checkpoints and logs.
  std::string save, load;
  int64_t save_every = 0;  // 0: only at the end
  std::string log_json, trace;
  // A JSON object of every rank's engine peak over the steps and bytes held at the end
  // (tensor::memory_stats), written by rank 0 after the last step.
  std::string log_memory;
  bool quiet = false;
  int threads = 0;  // tensor threads per rank; 0: CHORUS_TENSOR_THREADS, else cores / local ranks
  // Where each rank computes: cpu, cuda (the GPU of the local rank, modulo the GPUs; ranks may
  // share one) or cuda:N (that GPU for every rank).
  std::string device = "cpu";
  // --convert FROM TO: a checkpoint directory to one file of named tensors, or back; nothing
  // else runs (empty: train).
  std::string convert_from, convert_to;
  // Print the pipeline schedule the flags describe (and draw it as SVG), then stop: no ranks.
  bool show_schedule = false;
  std::string schedule_svg;
};

// Parses argv (without the program name), flags in any order. Throws UsageError for anything
// malformed, an unknown flag (naming the nearest valid one), or a value out of range.
struct UsageError {
  std::string message;
};
Options parse_options(const std::vector<std::string>& args);

// The mesh for `world` ranks: the flags given, the rest chosen; `reason` says how. Throws
// UsageError when the mesh does not divide the world or the model cannot be split on it (heads
// or layers that do not divide, micro-batches fewer than stages, a batch the replicas and
// micro-batches do not divide, a combination the layers do not support).
struct Mesh {
  int dp = 1, tp = 1, pp = 1;
  int ep = 1;  // divides dp: groups of ep consecutive dp ranks share an MoE layer's experts
  int micro_batches = 1;
  int chunks = 1;
  std::string reason;
};
Mesh resolve_mesh(const Options& o, int world);

std::string usage();

}  // namespace chorus::train
