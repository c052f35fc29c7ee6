// chorus — argument validation for Communicator calls (see validate.cc).
#pragma once

#include "algo/algorithm.h"

namespace chorus {

// Throws InvalidArgument naming the call and the argument when `a` is not a valid call for this
// rank of a `world`-rank communicator.
void validate(const algo::CollArgs& a, int rank, int world);

}  // namespace chorus
