// chorus-plan's command line: the model (a preset or chorus-train's shape flags), the training
// set-up, the cluster, the mesh degrees to fix, and the output form.
#pragma once

#include <string>
#include <vector>

#include "mesh.h"
#include "setup.h"

namespace chorus::plan {

struct Options {
  Setup setup;
  std::string cluster = "8xh100";
  int nodes = 1;
  int per_node = 0;  // devices per node; 0: the preset's
  MeshRequest mesh;
  bool json = false;
  std::string svg;  // a picture of the plan to write (empty: none)
  bool help = false;
};

// Parses argv without the program name. Throws PlanError for an unknown flag (naming the nearest),
// a malformed or out-of-range value, or an unknown preset.
Options parse_options(const std::vector<std::string>& args);

std::string usage();

}  // namespace chorus::plan
