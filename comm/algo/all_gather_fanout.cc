// Fan-out all-gather: every rank writes its block once into its shared buffer
// (Exchange::post_fan_out) and copies every peer's block out of theirs. All ranks read one
// writer's slots at about the same time, while they are still in the shared cache, so the
// blocks come from memory once rather than once per reader. Where the transport has no shared
// buffer (ranks on several hosts, device memory) it runs the direct algorithm.
#include "algo/algorithm.h"

namespace chorus::algo {

void all_gather_fanout(Context& c, const CollArgs& a) {
  if (a.mem != nullptr || !c.ex.fans_out()) return all_gather_direct(c, a);
  const int n = c.size, r = c.rank;
  const size_t bytes = a.bytes();
  const bool stream = stream_results(c, a, bytes * static_cast<size_t>(n));
  std::byte* own = a.recv + static_cast<size_t>(r) * bytes;
  c.ex.step("fan-out blocks");
  if (bytes <= Exchange::kFanSmallBytes) {  // latency-bound: each block goes whole at once
    c.ex.fan_small(a.send, a.send != own ? own : nullptr, Exchange::kAllPeers, a.recv, bytes,
                   bytes);
    return;
  }
  c.ex.post_fan_out(a.send, bytes, a.send != own ? own : nullptr, stream);
  // Readers start at different writers (rank + 1, rank + 2, ...), so no writer waits for all of
  // them at once.
  for (int k = 1; k < n; ++k) {
    const int p = (r + k) % n;
    c.ex.post_fan_in(p, a.recv + static_cast<size_t>(p) * bytes, bytes, stream);
  }
  c.ex.wait_all();
}

}  // namespace chorus::algo
