// Internal: the caching allocator behind a GPU device's tensors. Freeing device memory makes the
// runtime wait for the device, and a training step frees and allocates the same sizes again and
// again, so freed blocks are kept and handed to the next request of their size class.
//
// Size classes: requests round up to a multiple of 512 bytes up to 1 MiB, and above to a
// quarter octave (2^k times 1, 1.25, 1.5 or 1.75: at most 25% slack), so sizes that drift a
// little still share blocks. A request takes a free block of its class, else a fresh one from
// the raw allocator; when that fails, every free block goes back (release_cached) and it tries
// once more. Blocks are never split or merged.
//
// Ordering: a device's kernels and copies all run on its one compute stream, in issue order, so
// a block freed by one op and taken by the next is reused in stream order: the earlier op's
// kernels finish before the later op's start. Work on another stream that uses a block must be
// ordered against the compute stream by its owner (events), as with any caching allocator.
//
// Pure bookkeeping over the raw allocator it is given (tested on the CPU with host memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "chorus/tensor/storage.h"

namespace chorus::tensor {

class CachingAllocator {
 public:
  struct Raw {
    std::function<void*(size_t bytes)> allocate;  // throws when out of memory
    std::function<void(void* p)> free;            // must not throw
  };
  explicit CachingAllocator(Raw raw);
  ~CachingAllocator();  // returns every block, free or not, to the raw allocator
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // The class a request of `bytes` takes (at least 512 bytes, so a block is never null).
  static size_t size_class(size_t bytes);
  // The quarter octave at or above `bytes` (> 0): 2^k times 1, 1.25, 1.5 or 1.75. The classes
  // above 1 MiB, and the CPU block cache's (runtime/block_cache.h).
  static size_t quarter_octave(size_t bytes);

  // A block of at least `bytes` (never null). Throws what the raw allocator throws when even an
  // empty cache leaves no room.
  void* allocate(size_t bytes);
  // Gives back what allocate(bytes) returned: it waits in its class's free list.
  void deallocate(void* p, size_t bytes) noexcept;
  // Returns every free block to the raw allocator.
  void release_cached() noexcept;

  // current: requested bytes of the live blocks; peak: its high-water mark since reset_peak();
  // cached: bytes of the free blocks.
  MemoryStats stats() const;
  void reset_peak();
  // Bytes the raw allocator holds for this cache (live and free blocks, by class size).
  int64_t reserved_bytes() const;

 private:
  Raw raw_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // by class size
  std::unordered_map<void*, size_t> live_;               // block -> class size
  int64_t current_ = 0, peak_ = 0, cached_ = 0, reserved_ = 0;
};

}  // namespace chorus::tensor
