// chorus — for chorus's own tools (chorus-bench, chorus-tune): the size a call selects its
// algorithm by, so that a tool sweeping sizes names them as the communicator's selector does.
// Installed with the other headers, but not part of the API a trainer uses: it may change
// between versions.
#pragma once

#include <cstddef>

#include "chorus/communicator.h"

namespace chorus {

// The bytes a call selects its algorithm by (what Communicator::algorithm_for and explain take):
// the call's count times the element size, times the world size for reduce_scatter and
// all_gather; one rank's block for gather and scatter.
size_t selection_bytes(Collective coll, size_t count, DataType dtype, int world_size);
// The count of a call of `bytes` selection bytes (at least 1 element).
size_t count_for_selection_bytes(Collective coll, size_t bytes, DataType dtype, int world_size);

}  // namespace chorus
