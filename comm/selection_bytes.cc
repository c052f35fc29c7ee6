// chorus/selection_bytes.h: the selector's rule (algo/selector.h) for the tools.
#include "chorus/selection_bytes.h"

#include "algo/selector.h"

namespace chorus {

size_t selection_bytes(Collective coll, size_t count, DataType dtype, int world_size) {
  return algo::selection_bytes(coll, count, dtype, world_size);
}

size_t count_for_selection_bytes(Collective coll, size_t bytes, DataType dtype, int world_size) {
  return algo::count_for_selection_bytes(coll, bytes, dtype, world_size);
}

}  // namespace chorus
