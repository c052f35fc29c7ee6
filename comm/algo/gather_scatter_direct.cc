// Direct gather and scatter: the root exchanges one block with every rank, all requests posted at
// once so the transport overlaps them.
#include "algo/algorithm.h"

namespace chorus::algo {

void gather_direct(Context& c, const CollArgs& a) {
  const size_t bytes = a.bytes();
  c.ex.step("all to root");
  if (c.rank != a.root) {
    c.ex.wait(c.ex.post_send(a.root, a.send, bytes));
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
    c.ex.wait(c.ex.post_recv(a.root, a.recv, bytes));
    return;
  }
  for (int p = 0; p < c.size; ++p)
    if (p != c.rank) c.ex.post_send(p, a.send + p * bytes, bytes);
  copy_if_distinct(a, a.recv, a.send + c.rank * bytes, bytes);
  c.ex.wait_all();
}

}  // namespace chorus::algo
