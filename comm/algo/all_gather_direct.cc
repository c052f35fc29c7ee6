// Direct all-gather: send our block to every peer and receive every peer's block in place.
// One step of latency, (n-1) x block bytes sent per rank.
#include "algo/algorithm.h"

namespace chorus::algo {

void all_gather_direct(Context& c, const CollArgs& a) {
  const int n = c.size, r = c.rank;
  const size_t bytes = a.bytes();
  c.ex.step("exchange blocks");
  if (bytes <= Exchange::kEagerPostBytes) {  // latency-bound: no overlap to gain
    copy_if_distinct(a, a.recv + r * bytes, a.send, bytes);
    c.ex.exchange_small(Exchange::kAllPeers, a.send, 0, Exchange::kAllPeers, a.recv, bytes, bytes);
    return;
  }
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    c.ex.post_send(p, a.send, bytes);
    c.ex.post_recv(p, a.recv + p * bytes, bytes);
  }
  c.ex.poke();  // peers read our block while we copy it into place
  copy_if_distinct(a, a.recv + r * bytes, a.send, bytes);
  c.ex.wait_all();
}

}  // namespace chorus::algo
