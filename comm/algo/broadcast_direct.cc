// Direct broadcast: the root sends the whole message to every rank. One step of latency; the
// root's send bandwidth is shared by n-1 receivers, so only for small messages.
#include "algo/algorithm.h"

namespace chorus::algo {

void broadcast_direct(Context& c, const CollArgs& a) {
  c.ex.step("root to all");
  if (c.rank == a.root) {
    for (int p = 0; p < c.size; ++p)
      if (p != a.root) c.ex.post_send(p, a.send, a.bytes());
    c.ex.poke();  // the peers read while the root copies its own
    copy_if_distinct(a, a.recv, a.send, a.bytes());
    c.ex.wait_all();
  } else {
    c.ex.wait(c.ex.post_recv(a.root, a.recv, a.bytes()));
  }
}

}  // namespace chorus::algo
