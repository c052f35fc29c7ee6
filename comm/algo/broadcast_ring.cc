// Pipelined chain broadcast: ranks in ring order (Context::ring) from the root pass each
// chunk to the next as soon as it has arrived, so the whole message takes about
// (n - 1 + chunks) chunk-times instead of (n - 1) message-times. A rank in the middle posts each
// receive with a forward to the next (Exchange::post_forward: over shared memory the chunk goes
// into the next rank's FIFO in the same pass that writes it to recv).
#include <algorithm>

#include "algo/algorithm.h"
#include "algo/patterns.h"

namespace chorus::algo {

void broadcast_ring(Context& c, const CollArgs& a) {
  const int n = c.size, p = pos_of(c, c.rank);
  const int pos = mod(p - pos_of(c, a.root), n);  // along the chain that starts at the root
  const int prev = pos > 0 ? rank_at(c, p - 1) : -1;
  const int next = pos < n - 1 ? rank_at(c, p + 1) : -1;
  const size_t es = a.elem(), chunk = chunk_elems(c, a.dtype);
  const bool stream = stream_results(c, a, a.count * es);
  c.ex.step("chain");
  for (size_t lo = 0; lo < a.count; lo += chunk) {
    const size_t len = std::min(chunk, a.count - lo);
    if (prev >= 0) {
      const Exchange::RequestId id = c.ex.post_recv(prev, a.recv + lo * es, len * es, stream);
      if (next >= 0) c.ex.post_forward(id, next);
    } else if (next >= 0) {
      // The root only waits: it may take part of the next rank's single-copy read.
      c.ex.post_send(next, a.send + lo * es, len * es, /*assist=*/true);
    }
    if (pos == 0 && a.send != a.recv) {
      // The root's own copy, a chunk at a time while the next rank reads the chunks posted.
      c.ex.poke();
      copy_if_distinct(a, a.recv + lo * es, a.send + lo * es, len * es, stream);
    }
  }
  c.ex.wait_all();
}

}  // namespace chorus::algo
