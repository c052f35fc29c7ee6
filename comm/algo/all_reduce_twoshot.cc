// Two-shot all-reduce: a direct reduce-scatter, then a direct all-gather. The buffer is cut into
// `size` segments (patterns.h segment()); rank r owns segment r.
//   1. Every rank sends segment p of its input to rank p. Rank r folds the n-1 copies of segment
//      r it receives into its own, one peer after another (r+1, r+2, ...), into recv; with
//      Context::rank_order it folds all n in rank order instead (reduce_scatter_direct_step()).
//   2. Every rank sends its reduced segment to every peer and receives theirs in place.
// Per rank 2(n-1)/n x bytes in and out, like the ring, but in two steps instead of 2(n-1): over
// single-copy links each receive reads the peer's buffer directly, and a rank whose peers are
// descheduled (more ranks than cores) still does its share, where a ring waits at every step for
// its neighbour to forward. Each element is reduced once, by its owner, then copied: identical
// bits on every rank.
#include "algo/algorithm.h"
#include "algo/patterns.h"

namespace chorus::algo {

void all_reduce_twoshot(Context& c, const CollArgs& a) {
  const int n = c.size, r = c.rank;
  const size_t es = a.elem();
  const auto seg = [&](int i) {
    return segment(a.count, static_cast<size_t>(n), static_cast<size_t>(i));
  };
  const auto [own_off, own_cnt] = seg(r);
  std::byte* own = a.recv + own_off * es;
  // In place, phase 2 overwrites the segments peers read in phase 1: the step returns once they
  // are done.
  reduce_scatter_direct_step(c, a, own);
  finish_avg(a, own, own_cnt, n);

  c.ex.step("all-gather");
  for (int k = 1; k < n; ++k) {
    const int p = mod(r + k, n);
    const auto [off, cnt] = seg(p);
    c.ex.post_send(p, own, own_cnt * es);
    c.ex.post_recv(p, a.recv + off * es, cnt * es);
  }
  c.ex.wait_all();
}

}  // namespace chorus::algo
