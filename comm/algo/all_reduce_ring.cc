// Ring all-reduce: a reduce-scatter followed by an all-gather around the communicator's ring
// (Context::ring; r below is this rank's ring position, and r + 1 the next rank on the ring).
//
// Vocabulary: the buffer is processed in *slices* of size x chunk elements (so a slice's data is
// still in cache when it is forwarded); each slice is cut into `size` *segments* (segment()).
// Reduce-scatter, step s = 0..n-2: send segment (r - s) to the next rank, receive segment
// (r - s - 1) from the previous one and reduce it with our own input into recv. After n-1 steps
// rank r holds the fully reduced segment r + 1. All-gather, step s: forward segment (r + 1 - s),
// receive segment (r - s) as is.
// Every send after the first is what the step before received: the reduce-scatter's results
// travel on to the next rank, and so do the all-gather's receives but the last. So each receive is
// posted with a forward (Exchange::post_forward), which over shared memory writes the incoming
// piece into the next rank's FIFO while it writes it to recv (NCCL's recvReduceCopySend and
// recvCopySend), and the result is never read back. A whole slice is posted at once; the requests
// to each peer complete in order.
// Cost per rank: 2(n-1) steps, 2(n-1)/n x bytes sent and received: bandwidth-optimal.
// Every element is reduced exactly once along one path and then copied, so all ranks end with
// identical bits.
#include <algorithm>

#include "algo/algorithm.h"
#include "algo/patterns.h"

namespace chorus::algo {

void all_reduce_ring(Context& c, const CollArgs& a) {
  const int n = c.size, r = pos_of(c, c.rank);
  const int next = rank_at(c, r + 1), prev = rank_at(c, r - 1);
  const size_t es = a.elem();
  const size_t slice = chunk_elems(c, a.dtype) * n;
  const bool stream = stream_results(c, a, a.count * es);
  for (size_t base = 0; base < a.count; base += slice) {
    const size_t len = std::min(slice, a.count - base);
    auto seg = [&](int i) {
      auto [off, cnt] = segment(len, n, mod(i, n));
      return std::pair<size_t, size_t>{base + off, cnt};
    };
    c.ex.step("reduce-scatter + all-gather");
    auto [o0, c0] = seg(r);
    c.ex.post_send(next, a.send + o0 * es, c0 * es);
    for (int s = 0; s < n - 1; ++s) {
      auto [ro, rc] = seg(r - s - 1);
      c.ex.post_forward(c.ex.post_recv_reduce(prev, a.recv + ro * es, a.send + ro * es, rc, a.dtype,
                                              a.op, stream),
                        next);
    }
    for (int s = 0; s < n - 1; ++s) {
      auto [ro, rc] = seg(r - s);
      const Exchange::RequestId id = c.ex.post_recv(prev, a.recv + ro * es, rc * es, stream);
      if (s < n - 2) c.ex.post_forward(id, next);
    }
    c.ex.wait_all();
  }
  finish_avg(a, a.recv, a.count, n);
}

}  // namespace chorus::algo
