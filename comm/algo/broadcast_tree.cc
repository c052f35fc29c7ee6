// Pipelined binary-tree broadcast from the root: each chunk is received from the parent and
// forwarded to up to two children. O(log n) depth: the choice for mid-size messages on many ranks.
#include <algorithm>

#include "algo/algorithm.h"
#include "algo/patterns.h"

namespace chorus::algo {

void broadcast_tree(Context& c, const CollArgs& a) {
  const TreeNode node = on_ring(c, rooted_tree(pos_of(c, c.rank), pos_of(c, a.root), c.size));
  const bool root = c.rank == a.root;
  const size_t es = a.elem(), chunk = chunk_elems(c, a.dtype);
  const std::byte* src = root ? a.send : a.recv;
  c.ex.step("tree");
  for (size_t lo = 0; lo < a.count; lo += chunk) {
    const size_t len = std::min(chunk, a.count - lo);
    if (node.parent >= 0) c.ex.wait(c.ex.post_recv(node.parent, a.recv + lo * es, len * es));
    for (int child : node.child)
      if (child >= 0) c.ex.post_send(child, src + lo * es, len * es);
  }
  c.ex.wait_all();
  if (root) copy_if_distinct(a, a.recv, a.send, a.bytes());
}

}  // namespace chorus::algo
