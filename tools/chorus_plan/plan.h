// chorus-plan: every mesh of the world evaluated (memory and step time, the micro-batching
// searched where the set-up leaves it free), sorted, with the recommended mesh and its reason.
#pragma once

#include <string>
#include <vector>

#include "cluster.h"
#include "memory.h"
#include "mesh.h"
#include "setup.h"
#include "step_time.h"

namespace chorus::plan {

struct MeshPlan {
  MeshChoice mesh;
  std::string invalid;  // non-empty: chorus cannot run the set-up here (no estimate)
  MemoryEstimate memory;
  StepTime time;
  bool fits = false;  // peak within the device's memory
};

struct Plan {
  Setup setup;
  Cluster cluster;
  std::vector<MeshPlan> meshes;  // runnable ones fastest first among those that fit, then the
                                 // ones that do not fit, then the ones chorus cannot run
  int recommended = -1;          // index into meshes; -1 when none fits
  std::string reason;            // one line
};

// Throws PlanError when the fixed mesh degrees cannot divide the cluster's world, or when the
// user fixed all three and chorus cannot run that mesh.
Plan make_plan(const Setup& s, const Cluster& c, const MeshRequest& request);

// "dp=8 tp=1 pp=1"
std::string mesh_name(const MeshChoice& m);

}  // namespace chorus::plan
