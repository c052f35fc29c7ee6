// Internal: DeviceBackend, the part of a GPU device's backend that needs no kernels of its own:
// memory, the device's compute stream, transfers to and from the host and between devices, and
// plain copies and zero fills (copy engines, memset). It is written against chorus/gpu/runtime.h
// only, so it serves any runtime chorus is built with; the CUDA backend (cuda/) derives from it and
// adds the kernels. Kernels it lacks throw, naming the kernel and the device (Backend::missing).
//
// Memory: the caching allocator (device/caching_allocator.h) over the runtime's allocations.
// Ordering: every kernel and copy of the device runs on its one compute stream, in call order, so
// a block freed by one op and handed to the next is never touched by both at once. Transfers to
// the host wait for the stream; nothing else does.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "backend/backend.h"
#include "chorus/gpu/runtime.h"
#include "device/caching_allocator.h"

namespace chorus::tensor {

class DeviceBackend : public Backend {
 public:
  // Makes the device's stream; `device` must be available (backend_for checked it).
  explicit DeviceBackend(Device device);
  ~DeviceBackend() override;

  // Blocks of the caching allocator; with allocation poisoning on (backend.h), filled with 0xFF
  // bytes on the stream first.
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) noexcept override;
  MemoryStats memory_stats() override;
  void empty_cache() override;
  void reset_peak_memory() override;
  void synchronize() override;
  gpu::Stream compute_stream() const override { return stream_.get(); }

  void copy_from_host(const Tensor& dst, const void* host) override;
  void copy_to_host(void* host, const Tensor& src) override;
  void copy_from_peer(const Tensor& dst, const Tensor& src) override;
  // Same dtype, both dense, not accumulating: a device-to-device copy. Anything else is a kernel.
  void copy(const Tensor& dst, const Tensor& src, bool accumulate) override;
  // 0 into a dense tensor: memset. Anything else is a kernel.
  void fill(const Tensor& t, double value) override;
  void zero(const Tensor& t) override;

 protected:
  // The device's compute stream; kernels are queued on it with the device current.
  gpu::Stream stream() const { return stream_.get(); }
  int ordinal() const { return device().index; }

 private:
  void* raw_allocate(size_t bytes);
  void raw_free(void* p) noexcept;

  gpu::OwnedStream stream_;
  std::mutex raw_mu_;
  std::map<void*, gpu::DeviceBuffer> raw_;  // every block the runtime gave, by address
  CachingAllocator cache_;
};

// The backend for a GPU device (available): a CudaBackend in a CUDA build (cuda/), else a
// DeviceBackend (memory and copies only; kernels "not implemented").
std::unique_ptr<Backend> make_device_backend(Device device);

}  // namespace chorus::tensor
