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
    for (int r = 0; r < n; ++r) doubly_loaded += (t0[r].child[1] >= 0) && (t1[r].child[1] >= 0);
    EXPECT_LE(doubly_loaded, 1) << "n=" << n;
  }
}

TEST(Patterns, DoubleTreePositionMapsAreInverse) {
  for (int n = 1; n <= 33; ++n)
    for (int which = 0; which < 2; ++which)
      for (int r = 0; r < n; ++r) EXPECT_EQ(dtree_rank(which, dtree_pos(which, r, n), n), r);
}

// ---- the ring by locality ---------------------------------------------------------------------

// How many ring edges join ranks whose places differ in `differs`.
template <class Differs>
int crossings(const std::vector<RankPlace>& places, const std::vector<int>& ring, Differs differs) {
  int k = 0;
  for (size_t i = 0; i < ring.size(); ++i)
    k += differs(places[ring[i]], places[ring[(i + 1) % ring.size()]]) ? 1 : 0;
  return k;
}

void expect_ring(const std::vector<int>& ring, size_t n) {
  ASSERT_EQ(ring.size(), n);
  if (n == 0) return;
  EXPECT_EQ(ring[0], 0);
  std::set<int> seen(ring.begin(), ring.end());
  EXPECT_EQ(seen.size(), n);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), static_cast<int>(n) - 1);
  if (n > 2) EXPECT_LT(ring[1], ring[n - 1]) << "canonical direction: towards the smaller";
}

TEST(RingByLocality, RankOrderWhenNothingTellsRanksApart) {
  for (size_t n : {0u, 1u, 2u, 3u, 8u}) {
    const std::vector<RankPlace> places(n);
    std::vector<int> expected(n);
    for (size_t i = 0; i < n; ++i) expected[i] = static_cast<int>(i);
    EXPECT_EQ(ring_by_locality(places), expected) << n;
  }
}

TEST(RingByLocality, CyclicHostsAreGroupedSoTheRingLeavesEachHostOnce) {
  // Slurm's cyclic distribution: rank r on host r % hosts.
  for (int hosts : {2, 3, 4})
    for (int per_host : {1, 2, 3, 4}) {
      const int n = hosts * per_host;
      std::vector<RankPlace> places(n);
      for (int r = 0; r < n; ++r) places[r].host = r % hosts;
      const std::vector<int> ring = ring_by_locality(places);
      expect_ring(ring, n);
      EXPECT_EQ(crossings(places, ring, [](auto& a, auto& b) { return a.host != b.host; }), hosts)
          << hosts << " hosts x " << per_host;
      // Rank order would cross on every edge.
      std::vector<int> rank_order(n);
      for (int r = 0; r < n; ++r) rank_order[r] = r;
      if (per_host > 1)
        EXPECT_EQ(crossings(places, rank_order, [](auto& a, auto& b) { return a.host != b.host; }),
                  n);
    }
}

TEST(RingByLocality, SocketsThenNumaNodesThenCpusWithinAHost) {
  // 2 hosts x 2 sockets x 2 NUMA nodes x 2 CPUs, ranks numbered in a scrambled order.
  std::vector<RankPlace> places;
  for (int h = 0; h < 2; ++h)
    for (int pk = 0; pk < 2; ++pk)
      for (int nd = 0; nd < 2; ++nd)
        for (int cpu = 0; cpu < 2; ++cpu)
          places.push_back({h, pk, pk * 2 + nd, pk * 4 + nd * 2 + cpu});
  std::vector<RankPlace> scrambled(places.size());
  for (size_t i = 0; i < places.size(); ++i) scrambled[(i * 5 + 3) % places.size()] = places[i];
  const std::vector<int> ring = ring_by_locality(scrambled);
  expect_ring(ring, scrambled.size());
  EXPECT_EQ(crossings(scrambled, ring, [](auto& a, auto& b) { return a.host != b.host; }), 2);
  EXPECT_EQ(crossings(scrambled, ring,
                      [](auto& a, auto& b) { return a.host != b.host || a.package != b.package; }),
            4);
  EXPECT_EQ(crossings(scrambled, ring,
                      [](auto& a, auto& b) { return a.host != b.host || a.numa != b.numa; }),
            8);
}

TEST(RingByLocality, RanksSharingACpuAreNeighbours) {
  // 8 ranks bound round-robin to 2 CPUs (as chorus-run --bind does with more ranks than cores).
  std::vector<RankPlace> places(8);
  for (int r = 0; r < 8; ++r) places[r] = {0, 0, 0, r % 2};
  EXPECT_EQ(ring_by_locality(places), (std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7}));
  // Unknown (-1) places sort first, in rank order.
  places[5] = {0, -1, -1, -1};
  EXPECT_EQ(ring_by_locality(places), (std::vector<int>{0, 2, 4, 6, 1, 3, 7, 5}));
}

}  // namespace
}  // namespace chorus::algo
