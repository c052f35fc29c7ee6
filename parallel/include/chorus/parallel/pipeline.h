// chorus::parallel — pipeline parallelism: the model cut into stages along its layers, the
// batch into micro-batches, and a schedule saying, per stage, what to do in which order.
//
// Vocabulary
//   p          pipeline ranks (mesh.pp().size()); stage s is pp rank s.
//   v          model chunks per rank (1, or > 1 for the interleaved schedule). The model is cut
//              into p*v *virtual stages*; virtual stage k is chunk k / p of rank k % p
//              (Megatron's interleaving: rank s holds virtual stages s, s+p, s+2p, ...).
//   m          micro-batches per step; their losses are scaled by 1/m (or loss_scale) and their
//              gradients accumulate, in micro-batch order, as one process accumulating them
//              would: each backward's whole contribution added to the sum in one step.
//
// A schedule is data: per stage, a list of Actions. One engine (PipelineEngine) runs any
// schedule; validate() checks one before it runs by simulating it. Provided: gpipe (all
// forwards, then all backwards), one_f_one_b (PipeDream-Flush/Megatron: p-s-1 warm-up forwards,
// then alternating, then cool-down backwards) and interleaved (Megatron's 1F1B over v chunks).
//
// Communication semantics the validator assumes and the engine provides. Every Send pairs with
// the peer's matching Recv (same kind, micro-batch and virtual-stage boundary). A run of
// communication actions in a stage's list is one group, posted at once and asynchronously; a
// compute action waits only for the receives it needs. Activations, gradients and the tied
// embedding's gradients travel on three channels (communicators), each of which runs its
// operations in the order they were posted; within a group, one send and one receive on a
// channel go out as one send_recv. A transfer completes when both its sides are at the head of
// their channel's queue (rendezvous: the strictest rule, which a large message meets), so a
// schedule the validator accepts cannot deadlock on ranks. The schedules post each receive in
// the group right after the compute step before the one that needs it (Megatron's
// send_forward_backward_recv_forward_backward).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/parallel/mesh.h"
#include "chorus/tensor/nn.h"

namespace chorus::parallel {

class Tracer;

enum class PipelineOp : uint8_t {
  kForward,         // forward of (micro, chunk)
  kBackward,        // backward of (micro, chunk)
  kSendActivation,  // (micro, chunk)'s output to the next virtual stage
  kRecvActivation,  // (micro, chunk)'s input from the previous virtual stage
  kSendGrad,        // the gradient of (micro, chunk)'s input to the previous virtual stage
  kRecvGrad,        // the gradient of (micro, chunk)'s output from the next virtual stage
  kSendTiedGrad,    // last stage: micro's gradient of the lm_head's copy of the token embedding
  kRecvTiedGrad,    // first stage: the same, added before micro's embedding backward
};
// (The data-parallel reduction is no action of its own: it runs during each stage's last
// backward, from its gradients' hooks, whichever backward that is.)
std::string_view to_string(PipelineOp op);

struct PipelineAction {
  PipelineOp op = PipelineOp::kForward;
  int micro = 0;
  int chunk = 0;
  friend bool operator==(const PipelineAction&, const PipelineAction&) = default;
};

struct PipelineSchedule {
  std::string name;
  int stages = 1;
  int chunks = 1;
  int micro_batches = 1;
  bool tied_embedding = true;  // the lm_head uses the first stage's token embedding
  std::vector<std::vector<PipelineAction>> actions;  // per stage, in order
};

// The schedules. Errors (InvalidArgument) name the constraint: stages >= 1, micro_batches >=
// stages, and for interleaved chunks >= 2 with micro_batches a multiple of stages.
PipelineSchedule gpipe(int stages, int micro_batches, bool tied_embedding = true);
PipelineSchedule one_f_one_b(int stages, int micro_batches, bool tied_embedding = true);
PipelineSchedule interleaved(int stages, int chunks, int micro_batches, bool tied_embedding = true);
// By name: "gpipe", "1f1b" (chunks must be 1), "interleaved".
PipelineSchedule make_schedule(const std::string& name, int stages, int chunks, int micro_batches,
                               bool tied_embedding = true);

// What validate() found. Costs are in units of one forward of one virtual stage (a backward
// costs `backward_cost`, communication nothing), so the bubble is the schedule's own.
struct PipelineSimulation {
  double makespan = 0;
  double bubble = 0;                  // 1 - (busy time of all stages) / (stages * makespan)
  std::vector<int> peak_activations;  // per stage: most forwards whose backward is pending
  // Per stage, the compute actions with their simulated [start, end): for pictures.
  struct Span {
    PipelineAction action;
    double start = 0, end = 0;
  };
  std::vector<std::vector<Span>> timeline;
};

// Simulates `s` and checks it: every (micro, chunk) a stage owns is forwarded and backwarded
// exactly once, backward after forward; inputs are received before use; every send has its
// receive and nothing waits forever (a deadlock names every stage's blocked action). Throws
// InvalidArgument with the first violation; returns the simulation.
PipelineSimulation validate(const PipelineSchedule& s, double backward_cost = 2.0);

// The textbook bubble: (p-1) / (m+p-1) for gpipe and 1f1b, ((p-1)/v) / (m + (p-1)/v) interleaved.
double predicted_bubble(const PipelineSchedule& s);

// A picture of a simulation: one row per stage, F/B boxes labelled with the micro-batch (and
// chunk), in SVG; and a one-line-per-stage text form ("F0 F1 . B0 ...").
std::string timeline_svg(const PipelineSchedule& s, const PipelineSimulation& sim);
std::string timeline_text(const PipelineSchedule& s, const PipelineSimulation& sim);

// Layer boundaries: cuts `costs` (the cost of the embedding, of every block, and of the head,
// in order: layers + 2 entries) into `parts` contiguous virtual stages of blocks, minimising the
// most expensive stage; the embedding goes with the first stage, the head with the last. Returns
// parts + 1 block indices (first 0, last the layer count). Every stage gets at least one block:
// fewer layers than parts is an InvalidArgument naming both.
std::vector<int64_t> balance_layers(const std::vector<double>& costs, int parts);
// Seconds of forward + backward of the embedding, each block and the head of `model` on a
// (micro_batch, context) input, median of `reps` (this process; the engine takes world rank 0's
// result so every rank cuts alike). Every rank of a tensor-parallel group must call it together.
std::vector<double> measure_layer_costs(tensor::nn::GPT& model, int64_t micro_batch, int reps = 3);

struct PipelineOptions {
  std::string schedule = "1f1b";  // gpipe, 1f1b, interleaved
  int chunks = 1;                 // interleaved: model chunks per rank
  int micro_batches = 1;
  // Block boundaries of the p*v virtual stages (p*v + 1 entries); empty: balanced by measured
  // cost (`balance = "measured"`) or by block count (`"uniform"`).
  std::vector<int64_t> boundaries = {};
  std::string balance = "measured";
  // The factor of each micro-batch's loss; 0: 1 / micro_batches (the step's loss the mean). With
  // data parallelism over D replicas summing gradients, 1 / (D * micro_batches) makes the sum the
  // mean over the global batch, as one process scaling by its micro-batch count.
  double loss_scale = 0;
};

// Runs a GPT's training step as a pipeline over the mesh's pp groups. Every rank builds the
// whole model (the same initialisation everywhere) and keeps only its virtual stages' parameters:
// the others' storage is released (touching one throws). The first stage owns the token
// embedding; the last stage's lm_head uses a copy of it, whose gradient goes to the first stage
// micro-batch by micro-batch (kSendTiedGrad), so the first stage accumulates it in the order one
// process would, and which receives the updated values after each step (sync_tied_weights()).
class PipelineEngine {
 public:
  // Collective over mesh.world() (every rank measures the cut, world rank 0's is used).
  PipelineEngine(tensor::nn::GPT& model, DeviceMesh& mesh, PipelineOptions options);
  ~PipelineEngine();
  PipelineEngine(const PipelineEngine&) = delete;
  PipelineEngine& operator=(const PipelineEngine&) = delete;

  const PipelineSchedule& schedule() const;
  const std::vector<int64_t>& boundaries() const;
  // This rank's parameters (what its optimizer and data-parallel wrapper hold), by name; and
  // whether a parameter name belongs to this rank.
  tensor::nn::NamedTensors parameters() const;
  bool owns(const std::string& name) const;
  // Every parameter, full, by name: each broadcast from the stage that owns it (collective over
  // pp; with tensor parallelism the slices stay slices).
  tensor::nn::NamedTensors gather_parameters();

  // One forward and backward of every micro-batch. `batch(micro)` returns (inputs, targets) of
  // that micro-batch (each (B, T); the first stage reads inputs, the last targets); `step` keys
  // dropout. `around_backward(last, backward)` runs each backward: it must call `backward()`, and
  // may hold a data-parallel no_sync guard around it for all but this rank's last backward of
  // the step (`last`), so that gradients are reduced once, during the last backward. Returns the
  // step's loss (the sum of the scaled micro-batch losses, in micro-batch order: the mean with
  // the default scale) on every stage.
  using Batch = std::function<std::pair<tensor::Tensor, tensor::Tensor>(int micro)>;
  using AroundBackward = std::function<void(bool last, const std::function<void()>& backward)>;
  double forward_backward(const Batch& batch, uint64_t step = 0,
                          const AroundBackward& around_backward = {});
  // After the optimizer step: the last stage receives the first stage's updated token embedding.
  void sync_tied_weights();

  // With a tracer: every forward and backward ("F 3.0" = micro-batch 3, chunk 0) on track
  // "compute", every wait for a stage's input on track "pipeline" (the bubble).
  void set_tracer(Tracer* tracer);
  // The communicators the engine uses, named for a trace ("pp act", "pp grad", "pp tied").
  std::vector<std::pair<std::string, Communicator*>> channels();

  // The scaled loss of each micro-batch of the last forward_backward, on every stage. A model
  // with experts: each MoE block's weighted auxiliary loss (scaled alike) is part of the loss
  // on the stage holding the block (the last stage adds it to its loss, another seeds its
  // gradient in its output's backward: tensor::with_side_loss); the losses sum the stages' parts.
  const std::vector<double>& losses() const;

  // What the last forward_backward measured on this rank.
  struct Stats {
    double total_seconds = 0;
    double compute_seconds = 0;  // forwards and backwards
    double wait_seconds = 0;     // blocked in receives (and fused send/receives)
    int peak_activations = 0;
  };
  Stats stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus::parallel
