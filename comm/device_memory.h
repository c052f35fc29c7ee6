// chorus — device buffers on the IPC path: which path a communicator's device buffers take, and
// the memory operations algorithms use on device buffers (algo::MemoryOps over the GPU kernels).
//
// Paths (docs/GPU.md, CHORUS_GPU_PATH):
//   ipc      the algorithms run on the caller's device buffers; peers read them through IPC
//            (shm_device.h), local copies and reductions are kernels on the communicator's stream
//   staging  device buffers are copied into pinned host memory, the host algorithms run there
//            (device_staging.h), the results are copied back
// Selection, the same on every rank: `ipc` when the setting allows it, the communicator has more
// than one rank, and its transport moves device memory (all ranks on one host, with the same GPU
// runtime and visible devices: decided at set-up); else `staging`. Ranks need not agree on the
// path of one call (the wire takes either), so a rank with host buffers simply runs the host path.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "algo/algorithm.h"
#include "chorus/gpu/runtime.h"

namespace chorus {

enum class GpuPath : uint8_t { kIpc, kStaging };
enum class GpuPathSetting : uint8_t { kAuto, kIpc, kStaging };

// "auto", "ipc" or "staging"; throws InvalidArgument for anything else.
GpuPathSetting parse_gpu_path(std::string_view text);
std::string_view to_string(GpuPath path);

// The path a communicator's device buffers take. `transport_ok` / `transport_why`: what the
// transport said (transport::Capabilities::moves_device_memory, host_memory_only). Throws
// InvalidArgument when the setting is kIpc and IPC is impossible. `why` (optional) says why the
// result is staging.
GpuPath choose_gpu_path(GpuPathSetting setting, int world_size, bool transport_ok,
                        const std::string& transport_why, std::string* why = nullptr);

// algo::MemoryOps on device memory of one device: every operation is queued on the
// communicator's own stream and waited for before returning. Scratch is device memory, kept and
// reused (grown on demand).
class DeviceMemoryOps final : public algo::MemoryOps {
 public:
  // Makes the stream on `device`, which must be current.
  explicit DeviceMemoryOps(int device);

  int device() const { return device_; }
  gpu::Stream stream() const { return stream_.get(); }
  // The current operation's deadline: waits for the device end there (Timeout).
  void set_deadline(std::chrono::steady_clock::time_point deadline) { deadline_ = deadline; }
  // Waits (until the deadline) for the work queued on the stream so far.
  void finish();

  void copy(std::byte* dst, const std::byte* src, size_t bytes) override;
  void reduce_n(DataType dtype, ReduceOp op, std::byte* dst, const void* const* srcs, int n,
                size_t count) override;
  void divide(DataType dtype, std::byte* dst, const std::byte* src, size_t count,
              int64_t divisor) override;
  std::byte* scratch(size_t slot, size_t bytes) override;

 private:
  int device_;
  gpu::OwnedStream stream_;
  gpu::Event done_;
  std::chrono::steady_clock::time_point deadline_;
  std::vector<gpu::DeviceBuffer> scratch_;
};

}  // namespace chorus
