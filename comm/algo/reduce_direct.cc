// Direct reduce: every rank sends its input to the root, which reduces the n inputs in rank
// order. One step of latency; the root receives (n-1) x bytes.

#include "algo/algorithm.h"

namespace chorus::algo {

void reduce_direct(Context& c, const CollArgs& a) {
  const int n = c.size, r = c.rank;
  const size_t bytes = a.bytes();
  c.ex.step("all to root");
  if (r != a.root) {
    c.ex.exchange_small(a.root, a.send, 0, Exchange::kNoPeer, nullptr, 0, bytes);
    return;
  }
  std::byte* inbox = c.scratch.get(0, bytes * n);
  c.ex.exchange_small(Exchange::kNoPeer, nullptr, 0, Exchange::kAllPeers, inbox, bytes, bytes);
  reduce_inbox(c, a, a.recv, a.send, inbox);
  finish_avg(a, a.recv, a.count, n);
}

}  // namespace chorus::algo
