// Ring all-gather: rank r's block goes to recv block r. With p this rank's ring position and R(q)
// the rank at position q (Context::ring), for s = 0..n-2 each rank forwards block R(p - s) to the
// next rank and receives block R(p - s - 1) from the previous one. Every send after the first is
// the block the step before received, so each receive but the last is posted with a forward
// (Exchange::post_forward: over shared memory the incoming piece goes into the next rank's FIFO in
// the same pass that writes it to recv).
// Pipelined in chunks of the block. Cost per rank: n-1 steps, (n-1)/n x output bytes moved.
#include <algorithm>
#include <cstring>

#include "algo/algorithm.h"
#include "algo/patterns.h"

namespace chorus::algo {

void all_gather_ring(Context& c, const CollArgs& a) {
  const int n = c.size, r = c.rank, p = pos_of(c, r);
  const int next = rank_at(c, p + 1), prev = rank_at(c, p - 1);
  const size_t es = a.elem(), block = a.count;
  const size_t chunk = chunk_elems(c, a.dtype);
  std::byte* own = a.recv + r * block * es;
  const bool stream = stream_results(c, a, block * es * n);
  c.ex.step("all-gather");
  for (size_t lo = 0; lo < block; lo += chunk) {
    const size_t len = std::min(chunk, block - lo);
    // Our own chunk goes out straight from send; its copy into place overlaps the next rank's
    // read.
    c.ex.post_send(next, a.send + lo * es, len * es);
    if (own != a.send) {
      c.ex.poke();
      copy_if_distinct(a, own + lo * es, a.send + lo * es, len * es, stream);
    }
    for (int s = 0; s < n - 1; ++s) {
      const size_t recv_blk = static_cast<size_t>(rank_at(c, p - s - 1));
      const Exchange::RequestId id =
          c.ex.post_recv(prev, a.recv + (recv_blk * block + lo) * es, len * es, stream);
      if (s < n - 2) c.ex.post_forward(id, next);
    }
    c.ex.wait_all();
  }
}

}  // namespace chorus::algo
