#include "common/fault_injection.h"

#include <string>

#include "chorus/config.h"
#include "chorus/error.h"

namespace chorus::parallel {
namespace {
const StringKnob kFaultKnob{"CHORUS_PARALLEL_FAULT", "",
                            "tests only: inject a fault into the parallel layer to prove the "
                            "equivalence tests catch it (ddp_reduce_twice, zero_shard_shift, "
                            "tp_head_slice, checkpoint_write)"};
}  // namespace

Fault injected_fault() {
  const std::string f = kFaultKnob.get();
  if (f.empty() || f == "none") return Fault::kNone;
  if (f == "ddp_reduce_twice") return Fault::kReduceTwice;
  if (f == "zero_shard_shift") return Fault::kShardShift;
  if (f == "tp_head_slice") return Fault::kHeadSlice;
  if (f == "checkpoint_write") return Fault::kCheckpointWrite;
  throw InvalidArgument(detail::concat(kFaultKnob.name(), "=", f,
                                       ": expected ddp_reduce_twice, zero_shard_shift, "
                                       "tp_head_slice or checkpoint_write"));
}

}  // namespace chorus::parallel
