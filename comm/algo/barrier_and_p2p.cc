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

void send_direct(Context& c, const CollArgs& a) {
  c.ex.step("send");
  c.ex.wait(c.ex.post_send(a.peer, a.send, a.bytes(), /*assist=*/true));
}

void recv_direct(Context& c, const CollArgs& a) {
  c.ex.step("recv");
  c.ex.wait(c.ex.post_recv(a.peer, a.recv, a.bytes()));
}

void send_recv_direct(Context& c, const CollArgs& a) {
  c.ex.step("send+recv");
  c.ex.post_send(a.peer, a.send, a.bytes());
  c.ex.post_recv(a.recv_peer, a.recv, a.recv_count * a.elem());
  c.ex.wait_all();
}

}  // namespace chorus::algo
