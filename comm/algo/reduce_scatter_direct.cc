// Direct reduce-scatter for small messages: send block p of the input to rank p, receive block r
// from everyone, reduce the n blocks in rank order. One step of latency.

#include "algo/algorithm.h"

namespace chorus::algo {

void reduce_scatter_direct(Context& c, const CollArgs& a) {
  const int n = c.size, r = c.rank;
  const size_t bytes = a.bytes();
  std::byte* inbox = c.scratch.get(0, bytes * n);
  c.ex.step("exchange blocks");
  c.ex.exchange_small(Exchange::kAllPeers, a.send, bytes, Exchange::kAllPeers, inbox, bytes, bytes);
  reduce_inbox(c, a, a.recv, a.send + r * bytes, inbox);
  finish_avg(a, a.recv, a.count, n);
}

}  // namespace chorus::algo
