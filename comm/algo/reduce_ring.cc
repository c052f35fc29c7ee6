// Pipelined chain reduce: the reverse of the chain broadcast. Ranks at positions
// n-1, n-2, ..., 0 (position = ring position - the root's, mod n) pass partials towards the root
// one chunk at a time; each adds its own input to what it receives and forwards the sum
// (Exchange::post_forward: over shared memory it goes into the next rank's FIFO as it is
// computed). Ranks in the middle keep partials in two alternating scratch chunks (one may still
// be in flight to the next rank).
#include <algorithm>

#include "algo/algorithm.h"
#include "algo/patterns.h"

namespace chorus::algo {

void reduce_ring(Context& c, const CollArgs& a) {
  const int n = c.size, p = pos_of(c, c.rank);
  const int pos = mod(p - pos_of(c, a.root), n);  // along the chain that ends at the root
  const int from = pos < n - 1 ? rank_at(c, p + 1) : -1;
  const int to = pos > 0 ? rank_at(c, p - 1) : -1;
  const size_t es = a.elem(), chunk = chunk_elems(c, a.dtype);
  std::byte* partial[2] = {nullptr, nullptr};
  Exchange::RequestId in_flight[2] = {0, 0};
  bool busy[2] = {false, false};
  if (to >= 0 && from >= 0) {
    partial[0] = c.scratch.get(0, std::min(chunk, a.count) * es);
    partial[1] = c.scratch.get(1, std::min(chunk, a.count) * es);
  }
  const bool stream = stream_results(c, a, a.count * es);
  c.ex.step("chain");
  for (size_t lo = 0, k = 0; lo < a.count; lo += chunk, ++k) {
    const size_t len = std::min(chunk, a.count - lo);
    if (from >= 0) {
      std::byte* dst = to < 0 ? a.recv + lo * es : partial[k % 2];
      if (to >= 0 && busy[k % 2]) c.ex.wait(in_flight[k % 2]);
      const Exchange::RequestId id =
          c.ex.post_recv_reduce(from, dst, a.send + lo * es, len, a.dtype, a.op, to < 0 && stream);
      if (to >= 0) {
        in_flight[k % 2] = c.ex.post_forward(id, to);
        busy[k % 2] = true;
      }
    } else if (to >= 0) {
      c.ex.post_send(to, a.send + lo * es, len * es);
    } else {
      copy_if_distinct(a, a.recv + lo * es, a.send + lo * es, len * es);
    }
  }
  c.ex.wait_all();
  if (pos == 0) finish_avg(a, a.recv, a.count, n);
}

}  // namespace chorus::algo
