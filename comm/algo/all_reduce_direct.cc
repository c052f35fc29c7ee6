// One-shot all-reduce for small messages: every rank sends its whole input to every peer,
// receives all of theirs, and reduces all n inputs itself in rank order. One step of latency;
// (n-1) x bytes sent per rank, so only worth it while messages are latency-bound. Every rank
// folds the same inputs in the same order, so the bits agree everywhere.

#include "algo/algorithm.h"

namespace chorus::algo {

void all_reduce_direct(Context& c, const CollArgs& a) {
  const int n = c.size;
  const size_t bytes = a.bytes();
  std::byte* inbox = c.scratch.get(0, bytes * n);
  c.ex.step("exchange inputs");
  c.ex.exchange_small(Exchange::kAllPeers, a.send, 0, Exchange::kAllPeers, inbox, bytes, bytes);
  reduce_inbox(c, a, a.recv, a.send, inbox);
  finish_avg(a, a.recv, a.count, n);
}

}  // namespace chorus::algo
