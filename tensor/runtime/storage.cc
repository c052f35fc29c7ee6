#include "chorus/tensor/storage.h"

#include <atomic>
#include <cstdlib>
#include <new>

#include "block_cache.h"
#include "chorus/error.h"

namespace chorus::tensor {
namespace {

constexpr size_t kAlignment = 64;  // a cache line; a full AVX-512 vector
std::atomic<int64_t> g_current_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};

void count_alloc(int64_t bytes) {
  const int64_t now = g_current_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !g_peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// A multiple of the alignment (what aligned_alloc wants), never 0 bytes.
size_t rounded_bytes(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  return rounded == 0 ? kAlignment : rounded;
}

}  // namespace

std::string to_string(Device device) {
  switch (device.type) {
    case DeviceType::kCPU:
      return "cpu";
    case DeviceType::kCUDA:
      return "cuda:" + std::to_string(device.index);
    case DeviceType::kHIP:
      return "hip:" + std::to_string(device.index);
  }
  return "unknown";
}

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  CHORUS_ARG_CHECK(device.is_cpu(), "storage on ", to_string(device),
                   ": this build has CPU storage only");
  reallocate();
}

Storage::~Storage() { release(); }

void Storage::release() {
  if (data_ == nullptr) return;
  detail::cache_give(data_, rounded_bytes(bytes_));
  data_ = nullptr;
  g_current_bytes.fetch_sub(static_cast<int64_t>(bytes_), std::memory_order_relaxed);
}

void Storage::reallocate() {
  if (data_ != nullptr) return;
  data_ = detail::cache_take(rounded_bytes(bytes_));
  count_alloc(static_cast<int64_t>(bytes_));
}

MemoryStats memory_stats() {
  return {g_current_bytes.load(std::memory_order_relaxed),
          g_peak_bytes.load(std::memory_order_relaxed), detail::cache_bytes()};
}

void empty_cache() { detail::cache_empty(); }

void reset_peak_memory() {
  g_peak_bytes.store(g_current_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace chorus::tensor
