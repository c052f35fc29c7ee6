// chorus — stream-ordered operations: a collective that starts after the work already queued on a
// stream, and that the stream's later work waits for, without the host thread blocking. The data
// of device buffers takes one of two paths (device_memory.h): on the IPC path the algorithms run
// on the caller's device buffers themselves; on the staging path it goes through pinned host
// staging blocks (device_staging.h) and the host algorithms. Host buffers given with a stream are
// used as they are.
//
// One operation, as its stream sees it (queued by prepare() on the caller's thread):
//
//   staging:  [earlier work] [copy in: device -> block] (staged) [wait: flag >= seq] [copy out]
//             (done) [later]
//   ipc:      [earlier work] (staged) [wait: flag >= seq] (done) [later]
//
// and on the communicator's progress thread: wait for `staged` -> run the algorithm (on the block;
// or on the device buffers, every device copy and kernel on the communicator's own stream and
// finished before it goes on) -> store seq into the flag (release) -> wait for `done` -> complete
// the Work.
//
// The flag is one 64-bit word of mapped pinned host memory per communicator; the stream waits on
// it with a stream memory operation or a polling kernel (gpu::stream_wait_value), so the host
// never links the driver and never blocks. Sequence numbers grow by one per operation and
// operations complete in issue order, so a store of seq releases every wait up to it; an
// operation whose stream side failed half-way is "abandoned" and released with its successor.
// Staging copies are on the caller's stream. The IPC path's device work is on the communicator's
// own stream (DeviceMemoryOps), never on the caller's, and it only starts after `staged` has
// completed: nothing the progress thread queues can wait behind a stream that waits for it.
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
#include "device_memory.h"

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
  uint64_t seq = 0;     // the flag value that releases the stream
  algo::CollArgs args;  // what the algorithm runs on: the staging block, host buffers, or (IPC
                        // path) the caller's device buffers with args.mem set
  StagingSlot* slot = nullptr;  // owned by DeviceOps; on the IPC path it only lends its events
  bool device_memory = false;   // the IPC path: args are device memory
};

class DeviceOps {
 public:
  // `device`: the communicator's device. `staging_limit`: pinned bytes in flight before a call
  // waits for earlier operations (one operation may use more). `path`: how device buffers move
  // (choose_gpu_path).
  DeviceOps(int device, int rank, size_t staging_limit, GpuPath path = GpuPath::kStaging);
  // Releases every stream still waiting, then frees the flag and the blocks once no stream uses
  // them (a bounded wait; past it they are left allocated, with a warning).
  ~DeviceOps();
  DeviceOps(const DeviceOps&) = delete;
  DeviceOps& operator=(const DeviceOps&) = delete;

  int device() const { return device_; }
  GpuPath path() const { return path_; }
  // The IPC path's memory operations and stream (null on the staging path).
  DeviceMemoryOps* memory() const { return memory_.get(); }

  // Caller's thread: queues the stream side of validated call `a` (with the staging copies when
  // `device_memory` on the staging path) and returns the operation for the progress thread. Waits
  // (up to `timeout`) when staging memory in flight is at its limit. Throws when the stream side
  // cannot be queued; the stream is then not left waiting.
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
  GpuPath path_;
  std::unique_ptr<DeviceMemoryOps> memory_;  // the IPC path
  gpu::PinnedHostBuffer flag_;  // mapped: the stream reads it, the progress thread writes it
  uint64_t issued_ = 0;         // last seq handed out (caller's thread)
  std::mutex mu_;               // guards everything below
  uint64_t released_ = 0;       // last value stored into the flag
  std::set<uint64_t> abandoned_;
  std::vector<std::unique_ptr<StagingSlot>> slots_;
};

}  // namespace chorus
