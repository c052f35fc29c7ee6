// Ring reduce-scatter: the first half of the ring all-reduce, arranged so that each rank ends
// with its own block. Input = n blocks of recv_count elements. With p this rank's ring position
// and R(q) the rank at position q (Context::ring): step s = 0..n-2 sends the partial of block
// R(p - s - 1) to the next rank, receives the partial of block R(p - s - 2) from the previous one
// and reduces our own input block into it; the last step lands block R(p), ours, in recv.
// Each step's partial is what the next step sends, so every receive but the last is posted with a
// forward (Exchange::post_forward: over shared memory the partial goes into the next rank's FIFO
// as it is computed). Partials live in two alternating scratch buffers (a buffer is reused two
// steps later, after the step that sent it has completed). Processed in chunks of the block to
// bound scratch memory.
// Cost per rank: n-1 steps, (n-1)/n x input bytes sent and received.
#include <algorithm>

#include "algo/algorithm.h"
#include "algo/patterns.h"

namespace chorus::algo {

void reduce_scatter_ring(Context& c, const CollArgs& a) {
  const int n = c.size, p = pos_of(c, c.rank);
  const int next = rank_at(c, p + 1), prev = rank_at(c, p - 1);
  const size_t es = a.elem(), block = a.count;
  const size_t chunk = chunk_elems(c, a.dtype);
  std::byte* partial[2] = {nullptr, nullptr};
  if (n > 2) {
    partial[0] = c.scratch.get(0, std::min(chunk, block) * es);
    partial[1] = c.scratch.get(1, std::min(chunk, block) * es);
  }
  const bool stream = stream_results(c, a, block * es);
  Exchange::RequestId forwarded[2] = {0, 0};
  c.ex.step("reduce-scatter");
  for (size_t lo = 0; lo < block; lo += chunk) {
    const size_t len = std::min(chunk, block - lo);
    c.ex.post_send(next, a.send + (static_cast<size_t>(rank_at(c, p - 1)) * block + lo) * es,
                   len * es);
    for (int s = 0; s < n - 1; ++s) {
      const size_t recv_blk = static_cast<size_t>(rank_at(c, p - s - 2));
      const bool last = s == n - 2;
      std::byte* dst = last ? a.recv + lo * es : partial[s % 2];
      // partial[s % 2] last went out two steps ago (the next rank receives that at its step s - 1,
      // so this never waits on a step of its own).
      if (!last && s >= 2) c.ex.wait(forwarded[s % 2]);
      const Exchange::RequestId id = c.ex.post_recv_reduce(
          prev, dst, a.send + (recv_blk * block + lo) * es, len, a.dtype, a.op, last && stream);
      if (!last) forwarded[s % 2] = c.ex.post_forward(id, next);
    }
    c.ex.wait_all();
  }
  finish_avg(a, a.recv, block, n);
}

}  // namespace chorus::algo
