// The training runs the parallel schemes are checked against, and the runs themselves.
//
// A run trains a tiny GPT for `steps` steps with AdamW. Each step, each of the `dp` replicas
// takes `accumulation` micro-batches; micro-batch (step, rank, k) is a pure function of the
// seed. The step's micro-batches in the order of the global batch are j = k * dp + rank: the
// one-process run takes them in that order.
//
// The reference is the one-process run itself: one model, the plain tensor engine, no
// communication, accumulating the dp x accumulation micro-batches of a step in that order, each
// loss scaled by 1 / (dp x accumulation), then clipping (when asked) and stepping AdamW. A step's
// reported loss is the sum of the scaled micro-batch losses in that order (the global batch's
// mean). The parallel runs scale and sum the same way (the gradients summed over replicas, not
// averaged), unless TrainSpec::average asks for the averaging reductions: then each replica
// scales by 1 / accumulation and the reductions divide by dp.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/tensor/nn.h"

namespace chorus::testing {

struct TrainSpec {
  tensor::nn::GPTConfig model{.vocab = 64, .context = 8, .layers = 3, .heads = 2, .width = 16};
  int64_t micro_batch = 2;  // rows per rank per micro-step
  int accumulation = 1;
  int steps = 4;
  uint64_t seed = 11;
  double lr = 3e-3;
  double weight_decay = 0.1;
  DataType autocast = DataType::kF32;  // kBF16: matmuls under autocast
  bool checkpointing = false;
  DataType param_dtype = DataType::kF32;  // the model converted with Module::to
  double clip = 0;  // > 0: gradients clipped to this global norm before each step
  // Parallel runs: the reductions average over the replicas (DataParallelOptions /
  // ZeroOptions::average) and each replica scales its losses by 1 / accumulation; equal to the
  // one-process run when dp is a power of two (the division by dp is then exact).
  bool average = false;
  // Checkpoints: saved after step `save_after` (>= 0) into save_dir; a run with load_dir starts
  // from that checkpoint (its losses then begin at the saved step).
  std::string save_dir = {}, load_dir = {};
  int save_after = -1;
};

// "ddp", "zero1", "zero2", "zero3", with "+tp2" etc. for tensor parallelism.
struct Scheme {
  int zero_stage = 0;  // 0 = DistributedDataParallel
  int tp = 1;          // tensor-parallel ranks
  int pp = 1;          // pipeline stages (> 1: TrainSpec::accumulation micro-batches per step)
  std::string schedule = "1f1b";
  int chunks = 1;
  int zero_group = 0;  // ZeroOptions::shard_group (0: all of dp)
  // the rest of the world is data parallel
  std::string name() const {
    return (zero_stage == 0 ? "ddp" : "zero" + std::to_string(zero_stage)) +
           (zero_group > 0 ? "/group" + std::to_string(zero_group) : "") +
           (tp > 1 ? "+tp" + std::to_string(tp) : "") +
           (pp > 1 ? "+pp" + std::to_string(pp) + "/" + schedule : "");
  }
};

struct TrainResult {
  std::vector<double> losses;           // per step
  std::vector<double> norms;            // per step, the gradient norm before clipping (clip > 0)
  tensor::nn::NamedTensors parameters;  // final, full, by name (copies)
  // AdamW's "<param>.exp_avg" and "<param>.exp_avg_sq", full, by name (copies).
  tensor::nn::NamedTensors optimizer_state;
};

// Micro-batch (step, rank, k): inputs and targets (micro_batch, context), i64.
std::pair<tensor::Tensor, tensor::Tensor> micro_batch(const TrainSpec& spec, int step, int rank,
                                                      int k);

// The one-process run of the micro-batches `dp` replicas take (see above).
TrainResult reference_run(const TrainSpec& spec, int dp);

// This rank's part of the parallel run over `world` (dp = world / (tp pp)). Collective. With
// pp > 1 the micro-batches of a step go through a pipeline (PipelineEngine) and the parameters
// are gathered from the stages; with tp > 1 from the tp slices (only when pp is 1: with both,
// only the losses are kept); the optimizer state is left out of either.
TrainResult parallel_run(Communicator& world, const TrainSpec& spec, const Scheme& scheme);

// The first difference between two runs ("" when bit-identical): a step's loss or a parameter.
std::string first_bit_difference(const TrainResult& a, const TrainResult& b);
// The largest relative difference of a step's loss (|a-b| / |b|) or of the parameters taken
// as one vector (||a-b|| / ||b||, L2 over every element of every parameter).
// `where`, when given, names the worst.
double max_relative_difference(const TrainResult& a, const TrainResult& b,
                               std::string* where = nullptr);

}  // namespace chorus::testing
