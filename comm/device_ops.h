// chorus — stream-ordered operations: a collective that starts after the work already queued on a
// stream, and that the stream's later work waits for, without the host thread blocking. The data
// of device buffers goes through pinned host staging blocks (device_staging.h) and the host
// algorithms; host buffers given with a stream are used as they are.
//
// One operation, as its stream sees it (queued by prepare() on the caller's thread):
//
//   [earlier work] [copy in: device -> block] (staged) [wait: flag >= seq] [copy out] (done)
//   [later]
//
// and on the communicator's progress thread: wait for `staged` -> run the algorithm on the block
// -> store seq into the flag (release) -> wait for `done` -> complete the Work.
//
// The flag is one 64-bit word of mapped pinned host memory per communicator; the stream waits on
// it with a stream memory operation or a polling kernel (gpu::stream_wait_value), so the host
// never links the driver and never blocks. Sequence numbers grow by one per operation and
// operations complete in issue order, so a store of seq releases every wait up to it; an
// operation whose stream side failed half-way is "abandoned" and released with its successor.
// Every copy is on the caller's stream: the progress thread issues no device work, so nothing it
// does can queue behind a stream that waits for it.
//
// The seam for a device transport (cuda_ipc / hip_ipc, later): it keeps the ordering (events,
// flag, release) and replaces the staging block by the caller's device buffers, handing
// DeviceOp::args to algorithms whose transport moves device memory.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "algo/algorithm.h"
#include "chorus/gpu/runtime.h"

namespace chorus {

// One staging block with the two events that bound its use on a stream. Reused by later
// operations once `done` has completed.
struct StagingSlot {
  // kFinished: released, the stream may still be copying out; kLost: a failed call queued work on
  // the stream behind which nothing could be recorded (kept, never reused).
  enum class State : uint8_t { kFree, kInFlight, kFinished, kLost };
  gpu::PinnedHostBuffer block;
  gpu::Event staged;  // the stream has copied the inputs in (and finished the work before them)
  gpu::Event done;    // the stream has copied the outputs out
  State state = State::kFree;
};

// One stream-ordered operation, from prepare() to finish().
struct DeviceOp {
  uint64_t seq = 0;             // the flag value that releases the stream
  algo::CollArgs args;          // what the algorithm runs on: the staging block or host buffers
  StagingSlot* slot = nullptr;  // owned by DeviceOps
};

class DeviceOps {
 public:
  // `device`: the communicator's device. `staging_limit`: pinned bytes in flight before a call
  // waits for earlier operations (one operation may use more).
  DeviceOps(int device, int rank, size_t staging_limit);
  // Releases every stream still waiting, then frees the flag and the blocks once no stream uses
  // them (a bounded wait; past it they are left allocated, with a warning).
  ~DeviceOps();
  DeviceOps(const DeviceOps&) = delete;
  DeviceOps& operator=(const DeviceOps&) = delete;

  int device() const { return device_; }

  // Caller's thread: queues the stream side of validated call `a` (with the copies when
  // `device_memory`) and returns the operation for the progress thread. Waits (up to `timeout`)
  // when staging memory in flight is at its limit. Throws when the stream side cannot be queued;
  // the stream is then not left waiting.
  DeviceOp prepare(const algo::CollArgs& a, bool device_memory, gpu::Stream stream, int rank,
                   int world, std::chrono::milliseconds timeout);

  // Progress thread. Waits until the stream has reached the operation; false when `stop` said
  // so first. Throws Timeout at `deadline`.
  bool wait_staged(const DeviceOp& op, std::chrono::steady_clock::time_point deadline,
                   const std::function<bool()>& stop) const;
  // Lets the stream run past the operation. Called once per operation, also after a failure.
  void release(const DeviceOp& op) noexcept;
  // Waits until the stream has copied the outputs out (after release). Throws Timeout.
  void wait_done(const DeviceOp& op, std::chrono::steady_clock::time_point deadline) const;
  // The operation's slot may be reused once its `done` event has completed.
  void finish(DeviceOp& op) noexcept;

 private:
  StagingSlot& acquire(size_t bytes, std::chrono::milliseconds timeout);
  StagingSlot* find_free(size_t bytes);  // with mu_ held
  void store_flag(uint64_t value) noexcept;
  void abandon(uint64_t seq) noexcept;

  int device_;
  int rank_;
  size_t limit_;
  gpu::PinnedHostBuffer flag_;  // mapped: the stream reads it, the progress thread writes it
  uint64_t issued_ = 0;         // last seq handed out (caller's thread)
  std::mutex mu_;               // guards everything below
  uint64_t released_ = 0;       // last value stored into the flag
  std::set<uint64_t> abandoned_;
  std::vector<std::unique_ptr<StagingSlot>> slots_;
};

}  // namespace chorus
