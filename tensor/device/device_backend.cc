#include "device/device_backend.h"

#include "chorus/log.h"

namespace chorus::tensor {
namespace {

// A dense tensor's first byte.
void* bytes_of(const Tensor& t) { return t.data_ptr(); }

gpu::OwnedStream make_stream(int ordinal) {
  gpu::DeviceGuard on(ordinal);
  return gpu::OwnedStream(/*non_blocking=*/true);
}

}  // namespace

DeviceBackend::DeviceBackend(Device device)
    : Backend(device),
      stream_(make_stream(device.index)),
      cache_({[this](size_t bytes) { return raw_allocate(bytes); },
              [this](void* p) { raw_free(p); }}) {}

DeviceBackend::~DeviceBackend() = default;

void* DeviceBackend::raw_allocate(size_t bytes) {
  gpu::DeviceGuard on(ordinal());
  gpu::DeviceBuffer buffer(bytes);
  void* p = buffer.data();
  std::lock_guard lock(raw_mu_);
  raw_.emplace(p, std::move(buffer));
  return p;
}

void DeviceBackend::raw_free(void* p) noexcept {
  gpu::DeviceBuffer buffer;
  {
    std::lock_guard lock(raw_mu_);
    auto it = raw_.find(p);
    if (it == raw_.end()) return;
    buffer = std::move(it->second);
    raw_.erase(it);
  }
  // Freed outside the lock (the runtime waits for the device's work before it frees).
  try {
    gpu::DeviceGuard on(ordinal());
    buffer = gpu::DeviceBuffer();
  } catch (const std::exception& e) {
    CHORUS_WARN(kLogInit, "freeing ", to_string(device()), " memory: ", e.what());
  }
}

void* DeviceBackend::allocate(size_t bytes) {
  void* p = cache_.allocate(bytes);
  if (poison_allocations() && bytes > 0) {
    gpu::DeviceGuard on(ordinal());
    gpu::memset_async(p, 0xFF, bytes, stream());
  }
  return p;
}

void DeviceBackend::deallocate(void* p, size_t bytes) noexcept { cache_.deallocate(p, bytes); }

MemoryStats DeviceBackend::memory_stats() { return cache_.stats(); }

void DeviceBackend::empty_cache() {
  synchronize();  // no queued kernel still uses a free block
  cache_.release_cached();
}

void DeviceBackend::reset_peak_memory() { cache_.reset_peak(); }

void DeviceBackend::synchronize() { gpu::stream_synchronize(stream()); }

void DeviceBackend::copy_from_host(const Tensor& dst, const void* host) {
  gpu::DeviceGuard on(ordinal());
  gpu::memcpy_async(bytes_of(dst), host, dst.nbytes(), stream());
  gpu::stream_synchronize(stream());  // the host buffer may go once this returns
}

void DeviceBackend::copy_to_host(void* host, const Tensor& src) {
  gpu::DeviceGuard on(ordinal());
  gpu::memcpy_async(host, bytes_of(src), src.nbytes(), stream());
  gpu::stream_synchronize(stream());
}

void DeviceBackend::copy_from_peer(const Tensor& dst, const Tensor& src) {
  // src's device may still be computing it, and may reuse its memory once this returns.
  backend_for(src.device()).synchronize();
  gpu::DeviceGuard on(ordinal());
  gpu::memcpy_async(bytes_of(dst), bytes_of(src), dst.nbytes(), stream());
  gpu::stream_synchronize(stream());
}

void DeviceBackend::copy(const Tensor& dst, const Tensor& src, bool accumulate) {
  if (accumulate || dst.dtype() != src.dtype() || !dst.is_contiguous() || !src.is_contiguous())
    missing("copy (strided, converting or accumulating)");
  if (dst.numel() == 0) return;
  gpu::DeviceGuard on(ordinal());
  gpu::memcpy_async(bytes_of(dst), bytes_of(src), dst.nbytes(), stream());
}

void DeviceBackend::fill(const Tensor& t, double value) {
  if (value != 0.0 || !t.is_contiguous()) missing("fill (a value other than 0, or strided)");
  zero(t);
}

void DeviceBackend::zero(const Tensor& t) {
  if (t.numel() == 0) return;
  gpu::DeviceGuard on(ordinal());
  gpu::memset_async(bytes_of(t), 0, t.nbytes(), stream());
}

}  // namespace chorus::tensor
