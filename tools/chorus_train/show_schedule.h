// chorus-train --show-schedule: the pipeline schedule a command line describes, printed stage by
// stage (and drawn as SVG), with its predicted bubble and peak activations. No ranks needed.
#pragma once

#include "options.h"

namespace chorus::train {

// Prints the schedule of `mesh` (pp stages, micro-batches, chunks) named by `o.schedule`,
// validated; writes `o.schedule_svg` when given. Returns the exit status.
int show_schedule(const Options& o, const Mesh& mesh);

}  // namespace chorus::train
