// Fan-out broadcast: the root writes each piece of the message once into its shared buffer
// (Exchange::post_fan_out; over shared memory, slots every rank of the host maps) and every other
// rank copies it out from there, all at once. Each byte is written into shared memory once and
// read n - 1 times, where a chain (broadcast ring) writes and reads it n - 1 times each and a
// single-copy direct broadcast has n - 1 readers pin the root's pages in the kernel. Where the
// transport has no shared buffer (ranks on several hosts, device memory) it runs the chain.
#include "algo/algorithm.h"

namespace chorus::algo {

void broadcast_fanout(Context& c, const CollArgs& a) {
  if (a.mem != nullptr || !c.ex.fans_out()) return broadcast_ring(c, a);
  const size_t bytes = a.bytes();
  c.ex.step("fan-out");
  if (bytes <= Exchange::kFanSmallBytes) {  // latency-bound: the message goes whole at once
    if (c.rank == a.root)
      c.ex.fan_small(a.send, a.send != a.recv ? a.recv : nullptr, Exchange::kNoPeer, nullptr, 0,
                     bytes);
    else
      c.ex.fan_small(nullptr, nullptr, a.root, a.recv, 0, bytes);
    return;
  }
  if (c.rank != a.root) {
    c.ex.wait(c.ex.post_fan_in(a.root, a.recv, bytes, stream_results(c, a, bytes)));
    return;
  }
  // Out of place, the root's own copy is taken from each piece of the shared buffer just
  // written, still in cache.
  c.ex.post_fan_out(a.send, bytes, a.send != a.recv ? a.recv : nullptr,
                    stream_results(c, a, bytes));
  c.ex.wait_all();
}

}  // namespace chorus::algo
