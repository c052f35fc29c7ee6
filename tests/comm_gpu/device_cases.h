// One Communicator call on device buffers, checked against the exact reference: the unit the GPU
// collective tests enumerate. The inputs and expected values are those of tests/comm
// (reference.h: small integers, so that every dtype x op result is exact and the expected value,
// computed in double, is the one the kernels must produce).
#pragma once

#include <string>

#include "chorus/communicator.h"
#include "gpu_world.h"

namespace chorus::testing {

enum class Issue : uint8_t {
  kStream,    // *_async(..., stream) then Work::wait(); the inputs are copied in on the same
              // stream just before, with no host synchronisation in between
  kBlocking,  // the plain blocking call (default stream)
  kAsync,     // the plain *_async call (default stream), then Work::wait()
};

struct DeviceCase {
  Collective coll = Collective::kAllReduce;
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  size_t count = 0;
  bool in_place = false;
  int root = 0;
  int salt = 0;
  Issue issue = Issue::kStream;
  bool host_memory = false;  // this rank passes host buffers (other ranks may pass device ones)

  std::string describe() const;
};

// Runs `k` on every rank of `comm` (collectively; every rank passes the same case except for
// host_memory) with this rank's buffers taken from `arena`, and checks this rank's outputs and
// the guard bytes around its buffers, reporting failures with EXPECT_*. Point-to-point:
// kSendRecv sends to rank + 1 and receives from rank - 1; kSend and kRecv pair each even rank
// with the next one (the even one sends). Rooted collectives use k.root.
void run_device_case(Communicator& comm, const DeviceCase& k, DeviceArena& arena,
                     gpu::Stream stream);

// The bytes of device memory run_device_case takes from the arena for the largest case of
// `count` elements of `dtype` on `world` ranks.
size_t arena_bytes_for(size_t count, DataType dtype, int world);

}  // namespace chorus::testing
