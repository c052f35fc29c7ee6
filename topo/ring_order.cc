#include "chorus/topo/ring_order.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include "chorus/error.h"

namespace chorus::topo {
namespace {

// 2-opt is O(n^2) per pass; beyond this size the depth-first order is kept as it is.
constexpr size_t kMaxTwoOptMembers = 512;
constexpr int kMaxTwoOptPasses = 32;

}  // namespace

LinkClass link_between(std::span<const Topology> hosts, const Endpoint& a, const Endpoint& b) {
  if (a.host != b.host) return LinkClass::kNetwork;
  if (a.node < 0 || b.node < 0) return a.node == b.node ? LinkClass::kSelf : LinkClass::kSystem;
  return hosts[static_cast<size_t>(a.host)].link(a.node, b.node);
}

double ring_cost(std::span<const Endpoint> members, std::span<const int> order,
                 std::span<const Topology> hosts) {
  double cost = 0;
  for (size_t i = 0; i < order.size(); ++i)
    cost += link_cost(link_between(hosts, members[static_cast<size_t>(order[i])],
                                   members[static_cast<size_t>(order[(i + 1) % order.size()])]));
  return cost;
}

std::vector<int> ring_order(std::span<const Endpoint> members, std::span<const Topology> hosts) {
  const size_t n = members.size();
  for (const Endpoint& e : members)
    CHORUS_ARG_CHECK(e.host >= 0 && static_cast<size_t>(e.host) < hosts.size() &&
                         e.node < static_cast<int>(hosts[static_cast<size_t>(e.host)].nodes.size()),
                     "ring_order: endpoint (host ", e.host, ", node ", e.node, ") is not in the ",
                     hosts.size(), " hosts given");
  // Depth-first order: hosts in turn, nodes by id (ids are depth first), members by index.
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
    const Endpoint& a = members[static_cast<size_t>(x)];
    const Endpoint& b = members[static_cast<size_t>(y)];
    return std::tie(a.host, a.node) < std::tie(b.host, b.node);
  });

  // 2-opt: reversing order[i+1..j] replaces edges (i, i+1) and (j, j+1) by (i, j) and
  // (i+1, j+1); take every strict improvement until none is left.
  auto cost = [&](int x, int y) {
    return link_cost(
        link_between(hosts, members[static_cast<size_t>(x)], members[static_cast<size_t>(y)]));
  };
  if (n >= 4 && n <= kMaxTwoOptMembers) {
    for (int pass = 0; pass < kMaxTwoOptPasses; ++pass) {
      bool improved = false;
      for (size_t i = 0; i + 2 < n; ++i)
        for (size_t j = i + 2; j < n; ++j) {
          const int a = order[i], b = order[i + 1], c = order[j], d = order[(j + 1) % n];
          if (a == d) continue;
          if (cost(a, c) + cost(b, d) < cost(a, b) + cost(c, d) - 1e-9) {
            std::reverse(order.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                         order.begin() + static_cast<std::ptrdiff_t>(j) + 1);
            improved = true;
          }
        }
      if (!improved) break;
    }
  }
  // Canonical form: start at member 0, and go towards the smaller of its two neighbours.
  std::rotate(order.begin(), std::find(order.begin(), order.end(), 0), order.end());
  if (n > 2 && order[n - 1] < order[1]) std::reverse(order.begin() + 1, order.end());
  return order;
}

}  // namespace chorus::topo
