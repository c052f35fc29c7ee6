// The CPU block cache behind Storage: large buffers freed by one step are handed to the next
// instead of going back to the operating system. A training step allocates and frees the same
// sizes over and over (activations, gradients, GEMM operands); through malloc alone each large
// buffer is unmapped or trimmed on free and faulted in again page by page on the next use, which
// costs a fifth of a small model's step in kernel time. Blocks are cached by quarter octave
// (CachingAllocator::quarter_octave: sizes that drift from step to step, as a mixture's rows per
// expert do, share blocks), up to CHORUS_TENSOR_CACHE_MB; small buffers go
// straight to malloc, whose own free lists serve them well.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus::tensor::detail {

// 64-byte-aligned bytes of `bytes` (a multiple of 64, > 0); throws std::bad_alloc.
void* cache_take(size_t bytes);
// Gives back what cache_take(bytes) returned.
void cache_give(void* p, size_t bytes);
// Bytes held in the cache (free, ready for reuse).
int64_t cache_bytes();
// Returns every cached block to the system.
void cache_empty();

}  // namespace chorus::tensor::detail
