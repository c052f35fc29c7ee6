// chorus::parallel — sharded checkpoints that move between meshes.
//
//   parallel::CheckpointState state{.model = &model, .mesh = &mesh, .optimizer = opt.get()};
//   state.step = step;
//   parallel::save_checkpoint("ckpt", state);            // collective over the world
//   ...                                                  // later, any mesh:
//   const parallel::CheckpointInfo info = parallel::load_checkpoint("ckpt", state);
//
// Layout. A checkpoint is a directory: one file per rank (rank-00000.bin, ...) with the raw
// bytes of what that rank saves, and manifest.json: the model's configuration, the mesh it was
// saved from, the step and scalars, and per file its size and its entries. An entry is one piece
// of one logical tensor: its name ("h.0.attn.c_attn.weight"), its kind (param, exp_avg,
// exp_avg_sq, master), dtype and full shape, the runs of the full tensor's row-major elements it
// holds ((begin, length) pairs, in the order its bytes are stored), where its bytes start, and a
// checksum (FNV-1a 64) of them. A tensor-parallel slice is a few runs (rows or columns of the
// full matrix), a ZeRO shard one run of a parameter, a pipeline stage whole parameters.
//
// Saving: every rank writes what it alone holds: a ZeRO rank its shard; with DDP the replicas
// split each parameter and its AdamW state into dp equal parts, one each; a parameter every tp
// rank holds whole (a LayerNorm) is written by tp rank 0. Everything goes to <dir>.tmp first;
// when every rank's file is written, rank 0 writes the manifest and renames the directory into
// place (the previous checkpoint is replaced only then), so a crash mid-save leaves the previous
// checkpoint intact. The directory must be visible to every rank (one host, or a shared file
// system).
//
// Loading: every rank reads the manifest, checks that the model matches (naming the field that
// does not), and reads only the entries that overlap what it holds now, at whatever mesh it runs:
// this is how a checkpoint reshards (another dp, tp, pp, ep or ZeRO stage). Each entry's checksum
// is verified when it is read; a missing, truncated or corrupt file, an element no file holds, or a
// different model fail with an error naming the file and what is wrong.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "chorus/parallel/data_parallel.h"
#include "chorus/parallel/mesh.h"
#include "chorus/parallel/pipeline.h"
#include "chorus/parallel/zero.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/optim.h"

namespace chorus::parallel {

// What a run hands to save and load: the model as this rank holds it (tensor-parallel slices,
// pipeline stage, expert-parallel experts), its mesh, and its optimizer: an AdamW over the
// model's (or the stage's) parameters, or a ZeroOptimizer. A run whose experts step apart from
// the rest (chorus-train's experts on more than one rank) adds their optimizer, an AdamW (DDP) or
// a ZeroOptimizer (ZeRO-1/2) over the ranks that hold the same experts, and those ranks (its
// expert-data-parallel group): each writes its part of them (an equal split, or its shard).
struct CheckpointState {
  tensor::nn::GPT* model = nullptr;
  DeviceMesh* mesh = nullptr;
  tensor::optim::AdamW* optimizer = nullptr;
  ZeroOptimizer* zero = nullptr;
  PipelineEngine* pipeline = nullptr;
  tensor::optim::AdamW* expert_optimizer = nullptr;
  ZeroOptimizer* expert_zero = nullptr;        // or this (over expert_replicas), not both
  Communicator* expert_replicas = nullptr;     // with either; dp / expert_replicas = ep
  int64_t step = 0;                            // the next step to run
  std::map<std::string, double> scalars = {};  // anything else to restore (seed, loss scale, ...)
};

struct CheckpointInfo {
  int64_t step = 0;
  std::map<std::string, double> scalars;
  std::string saved_mesh;  // "dp=2 tp=1 pp=2 zero=1" (" ep=2" when the experts were split)
};

// Collective over state.mesh->world().
void save_checkpoint(const std::string& dir, const CheckpointState& state);
// Collective over state.mesh->world(): fills the parameters and the optimizer state this rank
// holds, and returns the step and scalars.
CheckpointInfo load_checkpoint(const std::string& dir, CheckpointState& state);

// One process: a checkpoint as one file of named tensors (tensor/serialize.h's format): every
// parameter by name, "<name>.exp_avg", "<name>.exp_avg_sq", "<name>.master" where saved, "step"
// and "config.<field>"; and the reverse, a checkpoint (one file, the mesh of one process) from
// such a file. The file does not depend on the mesh that saved the checkpoint: parameters first,
// then each kind of state, names in natural order ("h.2" before "h.10"), so checkpoints of equal
// values export equal bytes.
void export_checkpoint(const std::string& dir, const std::string& file);
void import_checkpoint(const std::string& file, const std::string& dir);

}  // namespace chorus::parallel
