// chorus::tensor — Storage: one reference-counted buffer on one device that tensors view.
//
// Several tensors (a parameter and its slices, a reshape, a transpose) share one Storage through
// shared_ptr; the buffer goes when the last view goes. Live and peak bytes are counted per device
// so memory savings (activation checkpointing, sharding) are measured, not guessed.
//
// A Storage's bytes come from its device's allocator (the device's Backend): on the CPU, 64-byte
// aligned buffers from a cache of freed ones (runtime/block_cache.h), since training steps free
// and allocate the same sizes again and again and reuse spares the page faults of fresh memory;
// on a GPU, the device's caching allocator.
//
// A Storage can also give its bytes back while its views live on (release) and take fresh ones
// later (reallocate): ZeRO-3 frees a block's gathered parameters between their uses, and every
// view, including the ones autograd saved for backward, sees the bytes gathered again. Touching
// the data of a released storage is an error, never a read of freed memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "chorus/tensor/device.h"

namespace chorus::tensor {

class Backend;

class Storage {
 public:
  // Uninitialised bytes on `device`. Throws InvalidArgument for a device this process cannot use
  // (device_unavailable_reason() says why).
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // Null while released.
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

  // Frees the bytes; the size is kept. No-op when already released.
  void release();
  // New, uninitialised bytes of the same size after release(). No-op when not released.
  void reallocate();
  bool released() const { return data_ == nullptr; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  Backend* backend_;  // the device's, which allocated data_
};

// Per device: the bytes held by live Storage objects, their high-water mark since the last reset,
// and the bytes of freed buffers kept for reuse (on the CPU, large buffers freed by one step are
// cached by size for the next, up to CHORUS_TENSOR_CACHE_MB, 1024 by default, 0 = none; on a GPU,
// the caching allocator's free blocks). A device this process cannot use throws InvalidArgument.
struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t cached_bytes = 0;
};
MemoryStats memory_stats(Device device = Device::cpu());
// Returns the device's cached buffers to the system (on a GPU, after the device's work is done).
void empty_cache(Device device = Device::cpu());
// Sets the device's peak to its current value (call before the region to measure).
void reset_peak_memory(Device device = Device::cpu());

}  // namespace chorus::tensor
