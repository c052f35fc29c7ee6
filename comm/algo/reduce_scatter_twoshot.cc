// Two-shot reduce-scatter: the two-shot all-reduce's first step on its own. The input is n blocks
// of recv_count elements, which are exactly the step's n segments (segment() of n x recv_count
// into n parts); rank r owns block r.
//   Every rank sends block p of its input to rank p, and folds the n-1 copies of block r it
//   receives into recv one after another: its own input first, then r+1, r+2, ... (so the ranks
//   read different peers at once), or with Context::rank_order rank 0's first, then rank 1's,
//   ..., which makes it the rank-ordered reduce-scatter for large messages.
// Cost per rank: one step, (n-1)/n x input bytes sent and received, like the ring's n-1 steps;
// no scratch but, in place with Context::rank_order, one block's partial on ranks >= 2 (the direct
// reduce-scatter gathers all n blocks first, the ring pipelines partials through two chunks).
// Each block is reduced once, by its owner.
#include "algo/algorithm.h"

namespace chorus::algo {

void reduce_scatter_twoshot(Context& c, const CollArgs& a) {
  const int n = c.size;
  CollArgs whole = a;
  whole.count = a.count * static_cast<size_t>(n);
  reduce_scatter_direct_step(c, whole, a.recv);
  finish_avg(a, a.recv, a.count, n);
}

}  // namespace chorus::algo
