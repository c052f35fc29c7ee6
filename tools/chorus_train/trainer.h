// chorus-train's training run: the mesh, the model split over it, the wrappers, the loop.
#pragma once

#include "chorus/communicator.h"
#include "options.h"

namespace chorus::train {

// Trains as `o` says on the ranks of `world` (the mesh already resolved). Returns the exit
// status of this rank.
int run(const Options& o, const Mesh& mesh, Communicator& world);

}  // namespace chorus::train
