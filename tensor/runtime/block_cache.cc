// The CPU block cache (block_cache.h).
#include "block_cache.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "chorus/config.h"
#include "device/caching_allocator.h"

namespace chorus::tensor::detail {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kSmallest = 64 * 1024;  // below this, malloc's own free lists

const IntKnob kCacheKnob{"CHORUS_TENSOR_CACHE_MB", 1024,
                         "MiB of freed tensor buffers kept for reuse by this process (0 = none)"};

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free;  // by size class
  int64_t bytes = 0;
  const int64_t limit = kCacheKnob.get() * (int64_t{1} << 20);
};

// Never destroyed: storages that outlive static destruction still give their blocks back.
Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

// A large buffer's bytes: its quarter octave (CachingAllocator::quarter_octave, at most 25%
// slack, whose pages are never touched), so that sizes which drift from step to step (a
// mixture's rows per expert) share blocks. A multiple of 64 from 64 KiB up.
size_t block_bytes(size_t bytes) {
  return bytes >= kSmallest ? CachingAllocator::quarter_octave(bytes) : bytes;
}

}  // namespace

void* cache_take(size_t bytes) {
  bytes = block_bytes(bytes);
  if (bytes >= kSmallest) {
    Cache& c = cache();
    std::lock_guard lock(c.mu);
    auto it = c.free.find(bytes);
    if (it != c.free.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.bytes -= static_cast<int64_t>(bytes);
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlignment, bytes);
  if (p == nullptr) {
    // Memory is short: what the cache holds goes back first, then one more try.
    cache_empty();
    p = std::aligned_alloc(kAlignment, bytes);
    if (p == nullptr) throw std::bad_alloc();
  }
  return p;
}

void cache_give(void* p, size_t bytes) {
  bytes = block_bytes(bytes);
  if (bytes >= kSmallest) {
    Cache& c = cache();
    std::lock_guard lock(c.mu);
    if (c.bytes + static_cast<int64_t>(bytes) <= c.limit) {
      c.free[bytes].push_back(p);
      c.bytes += static_cast<int64_t>(bytes);
      return;
    }
  }
  std::free(p);
}

int64_t cache_bytes() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  return c.bytes;
}

void cache_empty() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  for (auto& [size, blocks] : c.free)
    for (void* p : blocks) std::free(p);
  c.free.clear();
  c.bytes = 0;
}

}  // namespace chorus::tensor::detail
