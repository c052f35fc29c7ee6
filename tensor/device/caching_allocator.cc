#include "device/caching_allocator.h"

#include <algorithm>
#include <bit>

#include "chorus/error.h"

namespace chorus::tensor {
namespace {

constexpr size_t kSmallStep = 512;
constexpr size_t kSmallLimit = size_t{1} << 20;

}  // namespace

CachingAllocator::CachingAllocator(Raw raw) : raw_(std::move(raw)) {}

CachingAllocator::~CachingAllocator() {
  release_cached();
  for (auto& [p, size] : live_) raw_.free(p);
}

size_t CachingAllocator::size_class(size_t bytes) {
  if (bytes <= kSmallLimit)
    return std::max(kSmallStep, (bytes + kSmallStep - 1) / kSmallStep * kSmallStep);
  return quarter_octave(bytes);
}

size_t CachingAllocator::quarter_octave(size_t bytes) {
  // The power of two at or below, and steps of a quarter of it (whole bytes from 4 up).
  const size_t step = std::max<size_t>(1, std::bit_floor(bytes) / 4);
  return (bytes + step - 1) / step * step;
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = size_class(bytes);
  {
    std::lock_guard lock(mu_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= static_cast<int64_t>(size);
      live_.emplace(p, size);
      current_ += static_cast<int64_t>(bytes);
      peak_ = std::max(peak_, current_);
      return p;
    }
  }
  void* p = nullptr;
  try {
    p = raw_.allocate(size);
  } catch (...) {
    // Out of memory: the free blocks of other classes go back, then one more try.
    release_cached();
    p = raw_.allocate(size);
  }
  CHORUS_CHECK(p != nullptr, "the raw allocator returned null for ", size, " bytes");
  std::lock_guard lock(mu_);
  live_.emplace(p, size);
  reserved_ += static_cast<int64_t>(size);
  current_ += static_cast<int64_t>(bytes);
  peak_ = std::max(peak_, current_);
  return p;
}

void CachingAllocator::deallocate(void* p, size_t bytes) noexcept {
  std::lock_guard lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) return;  // not ours: nothing to do (never happens through Storage)
  const size_t size = it->second;
  live_.erase(it);
  current_ -= static_cast<int64_t>(bytes);
  try {
    free_[size].push_back(p);
    cached_ += static_cast<int64_t>(size);
  } catch (...) {
    reserved_ -= static_cast<int64_t>(size);
    raw_.free(p);  // no room to remember it: give it back at once
  }
}

void CachingAllocator::release_cached() noexcept {
  std::unordered_map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard lock(mu_);
    blocks.swap(free_);
    reserved_ -= cached_;
    cached_ = 0;
  }
  for (auto& [size, list] : blocks)
    for (void* p : list) raw_.free(p);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return {current_, peak_, cached_};
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mu_);
  peak_ = current_;
}

int64_t CachingAllocator::reserved_bytes() const {
  std::lock_guard lock(mu_);
  return reserved_;
}

}  // namespace chorus::tensor
