// The device caching allocator's bookkeeping (tensor/device/caching_allocator.h), over host
// memory: size classes, reuse by class, statistics, the retry after freeing the cache when the
// raw allocator runs out, and that every block goes back.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <new>
#include <set>

#include "device/caching_allocator.h"

namespace chorus::tensor {
namespace {

// Host memory standing in for the device's, counting what is held and refusing beyond a limit.
struct HostRaw {
  size_t limit = size_t{1} << 30;
  size_t held = 0;
  int allocations = 0, frees = 0;
  std::set<void*> live;
  CachingAllocator::Raw raw() {
    return {[this](size_t bytes) -> void* {
              if (held + bytes > limit) throw std::bad_alloc();
              void* p = std::malloc(bytes);
              held += bytes;
              ++allocations;
              live.insert(p);
              sizes[p] = bytes;
              return p;
            },
            [this](void* p) {
              held -= sizes[p];
              ++frees;
              live.erase(p);
              std::free(p);
            }};
  }
  std::map<void*, size_t> sizes;
};

TEST(CachingAllocator, SizeClasses) {
  EXPECT_EQ(CachingAllocator::size_class(0), 512u);
  EXPECT_EQ(CachingAllocator::size_class(1), 512u);
  EXPECT_EQ(CachingAllocator::size_class(512), 512u);
  EXPECT_EQ(CachingAllocator::size_class(513), 1024u);
  EXPECT_EQ(CachingAllocator::size_class(1 << 20), size_t{1} << 20);
  // Quarter octaves above 1 MiB: 2^k * {1, 1.25, 1.5, 1.75}.
  EXPECT_EQ(CachingAllocator::size_class((1 << 20) + 1), size_t{5} << 18);
  EXPECT_EQ(CachingAllocator::size_class(3 << 20), size_t{3} << 20);
  EXPECT_EQ(CachingAllocator::size_class((3 << 20) + 1), size_t{7} << 19);
  EXPECT_EQ(CachingAllocator::size_class((7 << 19) + 1), size_t{4} << 20);
  for (size_t bytes : {size_t{1}, size_t{4097}, size_t{1} << 21, (size_t{1} << 30) + 12345}) {
    const size_t c = CachingAllocator::size_class(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_LE(c, bytes + bytes / 4 + 512) << bytes;  // at most 25% slack (or one 512-byte step)
  }
}

// The CPU block cache's classes (runtime/block_cache.h) from 64 KiB: quarter octaves throughout,
// multiples of 64 there, every size in (2^k, 2^(k+1)] taking one of four blocks.
TEST(CachingAllocator, QuarterOctaves) {
  EXPECT_EQ(CachingAllocator::quarter_octave(1), 1u);
  EXPECT_EQ(CachingAllocator::quarter_octave(7), 7u);
  EXPECT_EQ(CachingAllocator::quarter_octave(9), 10u);
  EXPECT_EQ(CachingAllocator::quarter_octave(65536), 65536u);
  EXPECT_EQ(CachingAllocator::quarter_octave(65537), 81920u);
  EXPECT_EQ(CachingAllocator::quarter_octave((3 << 20) - 4096), size_t{3} << 20);
  std::set<size_t> classes;
  for (size_t bytes = 65536 + 64; bytes <= 131072; bytes += 64) {
    const size_t c = CachingAllocator::quarter_octave(bytes);
    EXPECT_EQ(c % 64, 0u) << bytes;
    EXPECT_GE(c, bytes);
    EXPECT_LE(c, bytes + bytes / 4) << bytes;
    classes.insert(c);
  }
  EXPECT_EQ(classes.size(), 4u);
}

TEST(CachingAllocator, FreedBlocksAreReusedWithinTheirClass) {
  HostRaw host;
  CachingAllocator cache(host.raw());
  void* a = cache.allocate(3000);
  cache.deallocate(a, 3000);
  EXPECT_EQ(cache.stats().cached_bytes, 3072);
  void* b = cache.allocate(2900);  // same class (3072): the same block
  EXPECT_EQ(b, a);
  EXPECT_EQ(host.allocations, 1);
  void* c = cache.allocate(5000);  // another class: a new block
  EXPECT_NE(c, a);
  EXPECT_EQ(host.allocations, 2);
  const MemoryStats s = cache.stats();
  EXPECT_EQ(s.current_bytes, 2900 + 5000);
  EXPECT_EQ(s.cached_bytes, 0);
  EXPECT_EQ(cache.reserved_bytes(), 3072 + 5120);
  cache.deallocate(b, 2900);
  cache.deallocate(c, 5000);
  EXPECT_EQ(cache.stats().current_bytes, 0);
  EXPECT_EQ(cache.stats().peak_bytes, 2900 + 5000);
  cache.reset_peak();
  EXPECT_EQ(cache.stats().peak_bytes, 0);
  cache.release_cached();
  EXPECT_EQ(cache.stats().cached_bytes, 0);
  EXPECT_EQ(cache.reserved_bytes(), 0);
  EXPECT_TRUE(host.live.empty());
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheAndRetries) {
  HostRaw host;
  host.limit = 8 << 20;
  CachingAllocator cache(host.raw());
  void* big = cache.allocate(6 << 20);
  cache.deallocate(big, 6 << 20);         // cached: 6 MiB held by the cache
  void* other = cache.allocate(5 << 20);  // another class: fits only once the cache is released
  EXPECT_NE(other, nullptr);
  EXPECT_EQ(cache.stats().cached_bytes, 0);
  EXPECT_EQ(host.frees, 1);
  EXPECT_THROW(cache.allocate(4 << 20), std::bad_alloc);  // really out of memory
  cache.deallocate(other, 5 << 20);
}

TEST(CachingAllocator, DestructionReturnsEveryBlock) {
  HostRaw host;
  {
    CachingAllocator cache(host.raw());
    void* a = cache.allocate(100);
    void* b = cache.allocate(200000);
    cache.deallocate(a, 100);
    (void)b;  // still live at destruction
  }
  EXPECT_TRUE(host.live.empty());
  EXPECT_EQ(host.allocations, host.frees);
}

}  // namespace
}  // namespace chorus::tensor
