// Two-shot reduce (Rabenseifner's): a direct reduce-scatter, then a gather to the root. The buffer
// is cut into `size` segments (patterns.h segment()); rank q owns segment q.
//   1. Every rank sends segment q of its input to rank q. Rank q folds the n-1 copies of segment q
//      it receives into its own (from q+1, q+2, ...; in rank order with Context::rank_order):
//      into recv at the root, into scratch elsewhere.
//   2. Every other rank sends its reduced segment to the root, which receives it in place.
// Every rank reduces 1/n of the buffer, where the direct, tree and ring reduces leave the root (or
// each link of the chain) to reduce all of it: for large buffers the work is spread over every
// rank's core, at (n-1)/n x bytes in and out per rank, plus (n-1)/n x bytes more into the root.
#include "algo/algorithm.h"
#include "algo/patterns.h"

namespace chorus::algo {

void reduce_twoshot(Context& c, const CollArgs& a) {
  const int n = c.size, r = c.rank;
  const bool root = r == a.root;
  const size_t es = a.elem();
  const auto seg = [&](int i) {
    return segment(a.count, static_cast<size_t>(n), static_cast<size_t>(i));
  };
  const auto [own_off, own_cnt] = seg(r);
  std::byte* own = root ? a.recv + own_off * es : c.scratch.get(0, own_cnt * es);
  // In place, the root's gather overwrites the segments its peers read in step 1: the step
  // returns once they are done.
  reduce_scatter_direct_step(c, a, own);

  c.ex.step("gather");
  if (!root) {
    c.ex.wait(c.ex.post_send(a.root, own, own_cnt * es));
    return;
  }
  for (int k = 1; k < n; ++k) {
    const int p = mod(r + k, n);
    const auto [off, cnt] = seg(p);
    c.ex.post_recv(p, a.recv + off * es, cnt * es);
  }
  c.ex.wait_all();
  finish_avg(a, a.recv, a.count, n);
}

}  // namespace chorus::algo
