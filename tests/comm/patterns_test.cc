// The algorithms' index math on its own: segments, binary trees, the double binary tree.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "algo/patterns.h"

namespace chorus::algo {
namespace {

TEST(Patterns, SegmentsTileTheBufferAndDifferByAtMostOne) {
  for (size_t count : {0u, 1u, 7u, 8u, 1000u, 1048579u})
    for (size_t parts = 1; parts <= 9; ++parts) {
      size_t next = 0, lo = SIZE_MAX, hi = 0;
      for (size_t i = 0; i < parts; ++i) {
        auto [off, len] = segment(count, parts, i);
        EXPECT_EQ(off, next) << count << "/" << parts << " segment " << i;
        next = off + len;
        lo = std::min(lo, len);
        hi = std::max(hi, len);
      }
      EXPECT_EQ(next, count);
      EXPECT_LE(hi - lo, 1u);
    }
}

// Parent/child links agree, every node is reached from the root exactly once, and depth is
// logarithmic.
void expect_valid_tree(const std::vector<TreeNode>& nodes, int root, const std::string& what) {
  const int n = static_cast<int>(nodes.size());
  EXPECT_EQ(nodes[root].parent, -1) << what;
  std::vector<int> depth(n, -1);
  std::vector<int> stack{root};
  depth[root] = 0;
  int max_depth = 0, seen = 0;
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    ++seen;
    for (int c : nodes[v].child) {
      if (c < 0) continue;
      ASSERT_GE(c, 0) << what;
      ASSERT_LT(c, n) << what;
      EXPECT_EQ(nodes[c].parent, v) << what << ": child " << c << " of " << v;
      ASSERT_EQ(depth[c], -1) << what << ": node " << c << " reached twice";
      depth[c] = depth[v] + 1;
      max_depth = std::max(max_depth, depth[c]);
      stack.push_back(c);
    }
  }
  EXPECT_EQ(seen, n) << what << ": not every node is in the tree";
  int log = 0;
  while ((1 << log) < n) ++log;
  EXPECT_LE(max_depth, log + 1) << what;
}

TEST(Patterns, BinaryTreeIsAValidLogDepthTree) {
  for (int n = 1; n <= 70; ++n) {
    std::vector<TreeNode> nodes(n);
    for (int p = 0; p < n; ++p) nodes[p] = binary_tree(p, n);
    expect_valid_tree(nodes, 0, "n=" + std::to_string(n));
  }
}

TEST(Patterns, RootedTreesAreValidForEveryRoot) {
  for (int n = 1; n <= 12; ++n)
    for (int root = 0; root < n; ++root) {
      std::vector<TreeNode> nodes(n);
      for (int r = 0; r < n; ++r) nodes[r] = rooted_tree(r, root, n);
      expect_valid_tree(nodes, root, "n=" + std::to_string(n) + " root=" + std::to_string(root));
    }
}

TEST(Patterns, DoubleTreeTreesAreValidAndShareFewInteriorNodes) {
  for (int n = 2; n <= 70; ++n) {
    std::vector<TreeNode> t0(n), t1(n);
    for (int r = 0; r < n; ++r) {
      t0[r] = dtree_node(0, r, n);
      t1[r] = dtree_node(1, r, n);
    }
    expect_valid_tree(t0, dtree_rank(0, 0, n), "tree 0, n=" + std::to_string(n));
    expect_valid_tree(t1, dtree_rank(1, 0, n), "tree 1, n=" + std::to_string(n));
    // A node with two children in both trees would carry twice the traffic of the others.
    int doubly_loaded = 0;
    for (int r = 0; r < n; ++r)
      doubly_loaded += (t0[r].child[1] >= 0) && (t1[r].child[1] >= 0);
    EXPECT_LE(doubly_loaded, 1) << "n=" << n;
  }
}

TEST(Patterns, DoubleTreePositionMapsAreInverse) {
  for (int n = 1; n <= 33; ++n)
    for (int which = 0; which < 2; ++which)
      for (int r = 0; r < n; ++r) EXPECT_EQ(dtree_rank(which, dtree_pos(which, r, n), n), r);
}

}  // namespace
}  // namespace chorus::algo
