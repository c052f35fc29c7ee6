// chorus — argument validation for Communicator calls (see validate.cc).
#pragma once

#include "algo/algorithm.h"

namespace chorus {

// Throws InvalidArgument naming the call and the argument when `a` is not a valid call for this
// rank of a `world`-rank communicator.
void validate(const algo::CollArgs& a, int rank, int world);

// Where the buffers of a call live. Host memory includes pinned host memory; device memory
// includes managed memory (gpu::is_device_pointer).
struct MemoryPlacement {
  bool device = false;  // the call's buffers are device memory (false: host, or no buffer at all)
  int device_id = -1;   // their device when `device`
};

// The placement of the buffers validated call `a` reads or writes on this rank (buffers it does
// not touch here, such as a non-root's broadcast send, are not looked at). Throws
// InvalidArgument naming the arguments when host and device memory are mixed, or device memory
// of two devices.
MemoryPlacement validate_memory(const algo::CollArgs& a, int rank, int world);

}  // namespace chorus
