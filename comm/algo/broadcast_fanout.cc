// Fan-out broadcast: the root writes each piece of the message once into its shared buffer
// (Exchange::post_fan_out; over shared memory, slots every rank of the host maps) and every other
// rank copies it out from there, all at once. Each byte is written into shared memory once and
// read n - 1 times, where a chain (broadcast ring) writes and reads it n - 1 times each and a
// single-copy direct broadcast has n - 1 readers pin the root's pages in the kernel. Where the
// transport has no shared buffer (ranks on several hosts, device memory) it runs the chain.
#include <algorithm>

#include "algo/algorithm.h"

namespace chorus::algo {

void broadcast_fanout(Context& c, const CollArgs& a) {
  if (a.mem != nullptr || !c.ex.fans_out()) return broadcast_ring(c, a);
  const size_t bytes = a.bytes();
  c.ex.step("fan-out");
  if (c.rank != a.root) {
    c.ex.wait(c.ex.post_fan_in(a.root, a.recv, bytes, stream_results(c, a, bytes)));
    return;
  }
  c.ex.post_fan_out(a.send, bytes);
  if (a.send != a.recv) {
    // The root's own copy, a chunk at a time between passes that refill the shared buffer as the
    // readers free it.
    const bool stream = stream_results(c, a, bytes);
    for (size_t lo = 0; lo < bytes; lo += c.chunk_bytes) {
      c.ex.poke();
      copy_if_distinct(a, a.recv + lo, a.send + lo, std::min(c.chunk_bytes, bytes - lo), stream);
    }
  }
  c.ex.wait_all();
}

}  // namespace chorus::algo
