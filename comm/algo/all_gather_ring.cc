// Ring all-gather: rank r's block goes to recv block r. With p this rank's ring position and R(q)
// the rank at position q (Context::ring), for s = 0..n-2 each rank forwards block R(p - s) to the
// next rank and receives block R(p - s - 1) from the previous one.
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
  c.ex.step("all-gather");
  for (size_t lo = 0; lo < block; lo += chunk) {
    const size_t len = std::min(chunk, block - lo);
    for (int s = 0; s < n - 1; ++s) {
      const size_t send_blk = static_cast<size_t>(rank_at(c, p - s));
      const size_t recv_blk = static_cast<size_t>(rank_at(c, p - s - 1));
      // Step 0 forwards our own chunk straight from send; its copy into place overlaps the
      // next rank's read.
      const std::byte* src = s == 0 ? a.send + lo * es : a.recv + (send_blk * block + lo) * es;
      c.ex.post_send(next, src, len * es);
      c.ex.post_recv(prev, a.recv + (recv_blk * block + lo) * es, len * es);
      if (s == 0 && own != a.send) {
        c.ex.poke();
        copy_if_distinct(a, own + lo * es, a.send + lo * es, len * es);
      }
      c.ex.wait_all();
    }
  }
}

}  // namespace chorus::algo
