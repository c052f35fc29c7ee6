// Direct gather and scatter: the root exchanges one block with every rank, all requests posted at
// once so the transport overlaps them.
#include "algo/algorithm.h"

namespace chorus::algo {

void gather_direct(Context& c, const CollArgs& a) {
  const size_t bytes = a.bytes();
  c.ex.step("all to root");
  if (c.rank != a.root) {
    c.ex.exchange_small(a.root, a.send, 0, Exchange::kNoPeer, nullptr, 0, bytes);
    return;
  }
  if (bytes <= Exchange::kEagerPostBytes) {  // latency-bound: no overlap to gain
    copy_if_distinct(a, a.recv + c.rank * bytes, a.send, bytes);
    c.ex.exchange_small(Exchange::kNoPeer, nullptr, 0, Exchange::kAllPeers, a.recv, bytes, bytes);
    return;
  }
  for (int p = 0; p < c.size; ++p)
    if (p != c.rank) c.ex.post_recv(p, a.recv + p * bytes, bytes);
  copy_if_distinct(a, a.recv + c.rank * bytes, a.send, bytes);
  c.ex.wait_all();
}

void scatter_direct(Context& c, const CollArgs& a) {
  const size_t bytes = a.bytes();
  c.ex.step("root to all");
  if (c.rank != a.root) {
    c.ex.exchange_small(Exchange::kNoPeer, nullptr, 0, a.root, a.recv, 0, bytes);
    return;
  }
  if (bytes <= Exchange::kEagerPostBytes) {  // latency-bound: no overlap to gain
    copy_if_distinct(a, a.recv, a.send + c.rank * bytes, bytes);
    c.ex.exchange_small(Exchange::kAllPeers, a.send, bytes, Exchange::kNoPeer, nullptr, 0, bytes);
    return;
  }
  for (int p = 0; p < c.size; ++p)
    if (p != c.rank) c.ex.post_send(p, a.send + p * bytes, bytes);
  copy_if_distinct(a, a.recv, a.send + c.rank * bytes, bytes);
  c.ex.wait_all();
}

}  // namespace chorus::algo
