// Direct all-to-all: block p of the input goes to rank p and lands in its block r. Every send and
// receive is posted at once; the Exchange progresses them together, so no pairwise ordering can
// deadlock.
#include "algo/algorithm.h"

namespace chorus::algo {

void all_to_all_direct(Context& c, const CollArgs& a) {
  const size_t bytes = a.bytes();
  c.ex.step("pairwise exchange");
  if (bytes <= Exchange::kEagerPostBytes) {  // each message goes out whole at once
    copy_if_distinct(a, a.recv + c.rank * bytes, a.send + c.rank * bytes, bytes);
    c.ex.exchange_small(Exchange::kAllPeers, a.send, bytes, Exchange::kAllPeers, a.recv, bytes,
                        bytes);
    return;
  }
  for (int k = 1; k < c.size; ++k) {
    // Staggered so that rank r talks to r+k while r-k talks to r: every pair is busy at once.
    const int to = (c.rank + k) % c.size, from = (c.rank - k + c.size) % c.size;
    c.ex.post_send(to, a.send + to * bytes, bytes);
    c.ex.post_recv(from, a.recv + from * bytes, bytes);
  }
  copy_if_distinct(a, a.recv + c.rank * bytes, a.send + c.rank * bytes, bytes);
  c.ex.wait_all();
}

}  // namespace chorus::algo
