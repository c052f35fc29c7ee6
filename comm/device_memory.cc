#include "device_memory.h"

#include <algorithm>

#include "chorus/error.h"
#include "chorus/kernels/gpu.h"
#include "transport/transport.h"

namespace chorus {

GpuPathSetting parse_gpu_path(std::string_view text) {
  if (text == "auto" || text.empty()) return GpuPathSetting::kAuto;
  if (text == "ipc") return GpuPathSetting::kIpc;
  if (text == "staging") return GpuPathSetting::kStaging;
  throw InvalidArgument(
      detail::concat("CHORUS_GPU_PATH must be auto, ipc or staging, got '", text, "'"));
}

std::string_view to_string(GpuPath path) { return path == GpuPath::kIpc ? "ipc" : "staging"; }

GpuPath choose_gpu_path(GpuPathSetting setting, int world_size, bool transport_ok,
                        const std::string& transport_why, std::string* why) {
  std::string reason;
  if (setting == GpuPathSetting::kStaging)
    reason = "CHORUS_GPU_PATH=staging";
  else if (world_size < 2)
    reason = "a single rank has no peer";
  else if (!transport_ok)
    reason = transport_why;
  if (reason.empty()) return GpuPath::kIpc;
  if (setting == GpuPathSetting::kIpc && world_size > 1)
    throw InvalidArgument("CHORUS_GPU_PATH=ipc, but device memory cannot move through IPC here: " +
                          reason);
  if (why != nullptr) *why = reason;
  return GpuPath::kStaging;
}

DeviceMemoryOps::DeviceMemoryOps(int device) : device_(device) {}

void DeviceMemoryOps::finish() {
  transport::finish_device_work({device_, stream_.get(), deadline_}, done_);
}

void DeviceMemoryOps::copy(std::byte* dst, const std::byte* src, size_t bytes) {
  if (bytes == 0) return;
  gpu::memcpy_async(dst, src, bytes, stream_);
  finish();
}

void DeviceMemoryOps::reduce_n(DataType dtype, ReduceOp op, std::byte* dst, const void* const* srcs,
                               int n, size_t count) {
  if (count == 0) return;
  // A kernel takes at most kMaxReduceInputs inputs; more fold on in the same order, the partial
  // result being the first input of the next call (f16/bf16 round once per call then).
  constexpr int kMax = kernels::gpu::kMaxReduceInputs;
  const void* batch[kMax];
  int first = std::min(n, kMax);
  kernels::gpu::reduce_n(dtype, op, dst, srcs, first, count, stream_);
  while (first < n) {
    const int take = std::min(n - first, kMax - 1);
    batch[0] = dst;
    std::copy(srcs + first, srcs + first + take, batch + 1);
    kernels::gpu::reduce_n(dtype, op, dst, batch, take + 1, count, stream_);
    first += take;
  }
  finish();
}

void DeviceMemoryOps::divide(DataType dtype, std::byte* dst, const std::byte* src, size_t count,
                             int64_t divisor) {
  if (count == 0) return;
  kernels::gpu::divide(dtype, dst, src, count, divisor, stream_);
  finish();
}

std::byte* DeviceMemoryOps::scratch(size_t slot, size_t bytes) {
  if (scratch_.size() <= slot) scratch_.resize(slot + 1);
  gpu::DeviceBuffer& b = scratch_[slot];
  if (b.bytes() < bytes) {
    // Grown by a quarter more than asked, so that slowly growing calls do not reallocate (a
    // device free synchronises the device).
    b = gpu::DeviceBuffer();
    b = gpu::DeviceBuffer(std::max<size_t>(4096, bytes + bytes / 4));
  }
  return static_cast<std::byte*>(b.data());
}

}  // namespace chorus
