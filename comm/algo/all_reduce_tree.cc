// Double-binary-tree all-reduce (as in NCCL): the buffer is split in two halves; half t is reduced
// up tree t to its root and broadcast back down the same tree. The two trees are built so that a
// rank interior in one is a leaf in the other, so every rank sends and receives about one half up
// and one half down, and latency is O(log n) steps instead of the ring's 2(n-1).
//
// Each half is pipelined in chunks. Up: a node reduces its children's partials into recv (child 0
// first, then child 1) and forwards the result to its parent; the root's recv then holds the
// final values. Down: each node receives the final chunk from its parent and forwards it to its
// children. Reduction happens once per element (at fixed nodes, in fixed order), so all ranks
// get identical bits.
#include <algorithm>

#include "algo/algorithm.h"
#include "algo/patterns.h"

namespace chorus::algo {

void all_reduce_tree(Context& c, const CollArgs& a) {
  const int n = c.size;
  const size_t es = a.elem();
  // The trees are laid over ring positions (so tree neighbours are machine neighbours).
  const TreeNode node[2] = {on_ring(c, dtree_node(0, pos_of(c, c.rank), n)),
                            on_ring(c, dtree_node(1, pos_of(c, c.rank), n))};
  const std::pair<size_t, size_t> half[2] = {segment(a.count, 2, 0), segment(a.count, 2, 1)};
  const size_t chunk = chunk_elems(c, a.dtype);
  const size_t chunks = (half[0].second + chunk - 1) / chunk;

  auto piece = [&](int t, size_t k) {
    const size_t lo = std::min(k * chunk, half[t].second);
    const size_t hi = std::min(lo + chunk, half[t].second);
    return std::pair<size_t, size_t>{half[t].first + lo, hi - lo};
  };

  c.ex.step("reduce up the trees");
  for (size_t k = 0; k < chunks; ++k) {
    for (int t = 0; t < 2; ++t) {
      auto [o, len] = piece(t, k);
      if (len == 0) continue;
      const std::byte* partial = a.send + o * es;
      for (int child : node[t].child) {
        if (child < 0) continue;
        c.ex.wait(c.ex.post_recv_reduce(child, a.recv + o * es, partial, len, a.dtype, a.op));
        partial = a.recv + o * es;
      }
      if (node[t].parent >= 0) {
        c.ex.post_send(node[t].parent, partial, len * es);  // completes while we go on
      } else {
        copy_if_distinct(a, a.recv + o * es, partial, len * es);
      }
    }
  }
  c.ex.step("broadcast down the trees");
  for (size_t k = 0; k < chunks; ++k) {
    for (int t = 0; t < 2; ++t) {
      auto [o, len] = piece(t, k);
      if (len == 0) continue;
      if (node[t].parent >= 0) c.ex.wait(c.ex.post_recv(node[t].parent, a.recv + o * es, len * es));
      for (int child : node[t].child)
        if (child >= 0) c.ex.post_send(child, a.recv + o * es, len * es);
    }
  }
  c.ex.wait_all();
  finish_avg(a, a.recv, a.count, n);
}

}  // namespace chorus::algo
