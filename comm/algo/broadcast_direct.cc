// Direct broadcast: the root sends the whole message to every rank. One step of latency; the
// root's send bandwidth is shared by n-1 receivers, so only for small messages.
#include "algo/algorithm.h"

namespace chorus::algo {

void broadcast_direct(Context& c, const CollArgs& a) {
  c.ex.step("root to all");
  const size_t bytes = a.bytes();
  if (bytes <= Exchange::kEagerPostBytes) {  // latency-bound: no overlap to gain
    if (c.rank == a.root) {
      copy_if_distinct(a, a.recv, a.send, bytes);
      c.ex.exchange_small(Exchange::kAllPeers, a.send, 0, Exchange::kNoPeer, nullptr, 0, bytes);
    } else {
      c.ex.exchange_small(Exchange::kNoPeer, nullptr, 0, a.root, a.recv, 0, bytes);
    }
    return;
  }
  if (c.rank == a.root) {
    // With one receiver the root may take part of its single-copy read; with more, their reads
    // are staggered instead (the shm transport's receive_rendezvous).
    for (int p = 0; p < c.size; ++p)
      if (p != a.root) c.ex.post_send(p, a.send, a.bytes(), /*assist=*/c.size == 2);
    c.ex.poke();  // the peers read while the root copies its own
    copy_if_distinct(a, a.recv, a.send, a.bytes());
    c.ex.wait_all();
  } else {
    c.ex.wait(c.ex.post_recv(a.root, a.recv, a.bytes()));
  }
}

}  // namespace chorus::algo
