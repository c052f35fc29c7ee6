// Pipelined binary-tree reduce to the root: each node reduces its children's partials (child 0
// then child 1) into its own input, chunk by chunk, and sends the result to its parent.
// Non-root nodes keep partials in two alternating scratch chunks.
#include <algorithm>

#include "algo/algorithm.h"
#include "algo/patterns.h"

namespace chorus::algo {

void reduce_tree(Context& c, const CollArgs& a) {
  const TreeNode node = on_ring(c, rooted_tree(pos_of(c, c.rank), pos_of(c, a.root), c.size));
  const bool root = c.rank == a.root;
  const bool has_children = node.child[0] >= 0;
  const size_t es = a.elem(), chunk = chunk_elems(c, a.dtype);
  std::byte* partial[2] = {nullptr, nullptr};
  Exchange::RequestId in_flight[2] = {0, 0};
  bool busy[2] = {false, false};
  if (!root && has_children) {
    partial[0] = c.scratch.get(0, std::min(chunk, a.count) * es);
    partial[1] = c.scratch.get(1, std::min(chunk, a.count) * es);
  }
  c.ex.step("tree");
  for (size_t lo = 0, k = 0; lo < a.count; lo += chunk, ++k) {
    const size_t len = std::min(chunk, a.count - lo);
    const std::byte* out = a.send + lo * es;
    if (has_children) {
      std::byte* dst = root ? a.recv + lo * es : partial[k % 2];
      if (!root && busy[k % 2]) c.ex.wait(in_flight[k % 2]);
      for (int child : node.child) {
        if (child < 0) continue;
        c.ex.wait(c.ex.post_recv_reduce(child, dst, out, len, a.dtype, a.op));
        out = dst;
      }
    }
    if (!root) {
      in_flight[k % 2] = c.ex.post_send(node.parent, out, len * es);
      busy[k % 2] = true;
    } else {
      copy_if_distinct(a, a.recv + lo * es, out, len * es);
    }
  }
  c.ex.wait_all();
  if (root) finish_avg(a, a.recv, a.count, c.size);
}

}  // namespace chorus::algo
