// chorus — pure index math of the algorithms: ring segments, binary trees, the double binary
// tree and dissemination rounds. No I/O here; tests/comm/patterns_test.cc checks each shape.
#pragma once

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "transport/rank_place.h"

namespace chorus::algo {

// Splits `count` elements into `parts` contiguous segments whose sizes differ by at most one
// (the first count % parts segments get the extra element). Returns {offset, length} of `i`.
constexpr std::pair<size_t, size_t> segment(size_t count, size_t parts, size_t i) {
  const size_t base = count / parts, extra = count % parts;
  const size_t offset = i * base + (i < extra ? i : extra);
  return {offset, base + (i < extra ? 1 : 0)};
}

constexpr int mod(int a, int n) { return ((a % n) + n) % n; }

// A node of a binary tree over positions 0..n-1, rooted at position 0.
struct TreeNode {
  int parent = -1;
  int child[2] = {-1, -1};
};

// The "bit" binary tree: position 0 is the root and has one child (the largest power of two
// below n); every other position p with lowest set bit L has children p - L/2 and p + k (k the
// largest power of two <= L/2 with p + k < n) and parent (p ^ L) | 2L, or p ^ L when that is
// out of range. Depth is ceil(log2 n); interior nodes of this tree are leaves of its mirror,
// which is what the double binary tree exploits.
constexpr TreeNode binary_tree(int pos, int n) {
  TreeNode t;
  if (n <= 1) return t;
  if (pos == 0) {
    int top = 1;
    while (top * 2 <= n - 1) top *= 2;
    t.child[0] = top;
    return t;
  }
  const int low = pos & -pos;
  const int up = (pos ^ low) | (low << 1);
  t.parent = up < n ? up : (pos ^ low);
  if (low > 1) {
    t.child[0] = pos - low / 2;
    for (int k = low / 2; k >= 1; k /= 2) {
      if (pos + k < n) {
        t.child[1] = pos + k;
        break;
      }
    }
  }
  return t;
}

// Position of `rank` in tree `which` (0 or 1) of the double binary tree over n ranks: tree 0 is
// the binary tree over ranks as they are, tree 1 its mirror (n even) or its shift by one (n odd),
// so that no rank is an interior node in both.
constexpr int dtree_pos(int which, int rank, int n) {
  if (which == 0) return rank;
  return n % 2 == 0 ? n - 1 - rank : mod(rank - 1, n);
}
constexpr int dtree_rank(int which, int pos, int n) {
  if (which == 0) return pos;
  return n % 2 == 0 ? n - 1 - pos : mod(pos + 1, n);
}

// Tree `which` of the double binary tree, expressed in ranks.
constexpr TreeNode dtree_node(int which, int rank, int n) {
  TreeNode t = binary_tree(dtree_pos(which, rank, n), n);
  if (t.parent >= 0) t.parent = dtree_rank(which, t.parent, n);
  for (int& c : t.child)
    if (c >= 0) c = dtree_rank(which, c, n);
  return t;
}

// A tree rooted at `root` for rooted collectives: the binary tree over positions
// (rank - root) mod n, in ranks.
constexpr TreeNode rooted_tree(int rank, int root, int n) {
  TreeNode t = binary_tree(mod(rank - root, n), n);
  if (t.parent >= 0) t.parent = mod(t.parent + root, n);
  for (int& c : t.child)
    if (c >= 0) c = mod(c + root, n);
  return t;
}

// Where a rank runs, as far as the ring cares (transport/rank_place.h).
using transport::RankPlace;

// The ring order (position -> rank) that keeps neighbours close: ranks sorted depth first by
// (host, package, NUMA node, CPU, rank), so the ring leaves each host, socket and NUMA node once
// (the fewest slow links a ring can cross); then put in canonical form: it starts at rank 0 and
// goes towards the smaller of rank 0's two neighbours. Rank order when nothing is known. This is
// topo::ring_order's depth-first order on the machine tree (chorus/topo/ring_order.h), computed
// from what every rank can tell about itself without hwloc.
inline std::vector<int> ring_by_locality(std::span<const RankPlace> places) {
  const size_t n = places.size();
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
    const RankPlace& a = places[static_cast<size_t>(x)];
    const RankPlace& b = places[static_cast<size_t>(y)];
    return std::tie(a.host, a.package, a.numa, a.cpu) < std::tie(b.host, b.package, b.numa, b.cpu);
  });
  if (n == 0) return order;
  std::rotate(order.begin(), std::find(order.begin(), order.end(), 0), order.end());
  if (n > 2 && order[n - 1] < order[1]) std::reverse(order.begin() + 1, order.end());
  return order;
}

}  // namespace chorus::algo
