// chorus-plan: the meshes dp x tp x pp that multiply to the world, and for each whether chorus can
// run the set-up on it (the rules chorus-train checks: heads over tp, layers over the stages, the
// batch over the replicas and micro-batches, micro-batches at least the stages, ZeRO-3 with dp
// alone).
#pragma once

#include <string>
#include <vector>

#include "setup.h"

namespace chorus::plan {

// Degrees the user fixed (0: free).
struct MeshRequest {
  int dp = 0, tp = 0, pp = 0;
  int ep = 0;  // a mixture of experts: 0 tries every ep that divides dp and the experts
};

struct MeshCandidate {
  MeshChoice mesh;      // micro-batching: as given, or 0 (to be searched)
  std::string invalid;  // empty: chorus can run it
};

// Every dp x tp x pp = world that agrees with `request` (and, for a mixture of experts, every ep
// that divides dp and the experts, or the one requested). Throws PlanError when the fixed degrees
// cannot divide the world.
std::vector<MeshCandidate> enumerate_meshes(const Setup& s, int world, const MeshRequest& request);

// Why chorus cannot run `s` at dp x tp x pp (x ep) with `micro_batches` per replica (empty: it
// can).
std::string mesh_problem(const Setup& s, int dp, int tp, int pp, int micro_batches, int ep = 1);

// The micro-batch counts per replica to consider at dp x pp: the one the set-up fixes, else
// every count that divides the replica's batch and is at least pp.
std::vector<int> micro_batch_options(const Setup& s, int dp, int pp);

}  // namespace chorus::plan
