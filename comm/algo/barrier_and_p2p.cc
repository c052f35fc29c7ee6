// Barrier (dissemination: in round k every rank signals rank + 2^k and waits for rank - 2^k;
// after ceil(log2 n) rounds everyone has transitively heard from everyone) and point-to-point.
#include "algo/algorithm.h"
#include "algo/patterns.h"

namespace chorus::algo {

void barrier_direct(Context& c, const CollArgs&) {
  const std::byte token{1};
  std::byte sink[1];
  c.ex.step("dissemination");
  // Each round one token out and one in, on the small-message path (np=2: 0.49-0.54 -> 0.41-0.47
  // us per barrier over four alternations).
  for (int k = 1; k < c.size; k *= 2)
    c.ex.exchange_small(mod(c.rank + k, c.size), &token, 0, mod(c.rank - k, c.size), sink, 0, 1);
}

// Point-to-point: messages matched by source, tag and order (Exchange::post_p2p_recv).
void send_direct(Context& c, const CollArgs& a) {
  c.ex.step("send");
  c.ex.post_p2p_send(a.peer, a.send, a.bytes(), a.tag, /*assist=*/true);
  c.ex.wait_all();
}

void recv_direct(Context& c, const CollArgs& a) {
  c.ex.step("recv");
  const auto id = c.ex.post_p2p_recv(a.peer, a.recv, a.bytes(), a.tag);
  c.ex.wait_all();  // also what was set aside on the way
  c.source = c.ex.source_of(id);
}

void send_recv_direct(Context& c, const CollArgs& a) {
  c.ex.step("send+recv");
  c.ex.post_p2p_send(a.peer, a.send, a.bytes(), a.tag);
  const auto id = c.ex.post_p2p_recv(a.recv_peer, a.recv, a.recv_count * a.elem(), a.recv_tag);
  c.ex.wait_all();
  c.source = c.ex.source_of(id);
}

}  // namespace chorus::algo
