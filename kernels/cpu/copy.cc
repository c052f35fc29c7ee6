// chorus — copy(): libc memcpy (memmove when the ranges overlap).
//
// Non-temporal (cache-bypassing) stores were measured against memcpy on the development machine
// (Xeon with AVX-512, 2 MiB L2 per core, 260 MiB L3, glibc 2.36), one core, GB/s of bytes read +
// written: 64 KiB 35 vs 69, 1 MiB 38 vs 43, 16 MiB 28 vs 25, 256 MiB 15 vs 19. A streaming copy
// loses everywhere except a narrow band around the L3 size, and glibc already switches to
// streaming stores itself past a threshold derived from the cache sizes, so copy() does not try to
// second-guess it. Callers that know the destination will not be read soon use copy_stream()
// (kernels/cpu/isa/copy_stream.cc) instead: there the saved read for ownership is what counts
// (docs/perf/collectives.md, the all-reduce bullet). chorus-kernels-bench prints both (copy/*).
#include <cstdint>
#include <cstring>

#include "chorus/kernels/cpu.h"

namespace chorus::kernels {

void copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  const auto d = reinterpret_cast<uintptr_t>(dst);
  const auto s = reinterpret_cast<uintptr_t>(src);
  if (d < s + bytes && s < d + bytes)
    std::memmove(dst, src, bytes);
  else
    std::memcpy(dst, src, bytes);
}

}  // namespace chorus::kernels
