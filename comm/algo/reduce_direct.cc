// Direct reduce: every rank sends its input to the root, which reduces the n inputs in rank
// order. One step of latency; the root receives (n-1) x bytes.

#include "algo/algorithm.h"

namespace chorus::algo {

void reduce_direct(Context& c, const CollArgs& a) {
  const int n = c.size, r = c.rank;
  const size_t bytes = a.bytes();
  c.ex.step("all to root");
  if (r != a.root) {
    c.ex.wait(c.ex.post_send(a.root, a.send, bytes));
    return;
  }
  std::byte* inbox = c.scratch.get(0, bytes * n);
  for (int p = 0; p < n; ++p)
    if (p != r) c.ex.post_recv(p, inbox + p * bytes, bytes);
  c.ex.wait_all();
  reduce_inbox(a, a.recv, a.send, inbox, r, n);
  finish_avg(a, a.recv, a.count, n);
}

}  // namespace chorus::algo
