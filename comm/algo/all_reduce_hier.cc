// Hierarchical all-reduce for communicators that span hosts: reduce within each host over shared
// memory, across hosts between one rank per host and *rail*, then spread within each host.
//
// Vocabulary: H hosts; a host's *local* ranks in ascending order, local index i; m = the fewest
// ranks any host has. *Rail* i (i < m) = the local rank i of every host: rail i owns *slice* i of
// the buffer (slice = segment(len, m, i)). Hosts with more than m ranks have *extra* ranks that
// contribute and receive but own no slice.
//   1. intra-host reduce-scatter: every local rank sends slice i to local rank i; local rank i
//      reduces the host's contributions to slice i in local-index order;
//   2. inter-host all-reduce of slice i along rail i: a ring of H ranks, one per host
//      (reduce-scatter + all-gather), so each host's network traffic is split over m ranks;
//   3. intra-host all-gather: local rank i sends its finished slice to every other local rank.
// The buffer is processed in *rounds* of m x H chunks, so scratch stays bounded and step 2 of a
// round moves chunk-sized messages.
// Cost per rank, bytes B: inter-host 2(H-1)/H x B/m sent (the ring over hosts), intra-host
// about 2 x B (m-1)/m; latency 2 + 2(H-1) steps per round.
// Invariant: every element is reduced exactly once (within its host in local order, then along
// its rail ring), then copied, so all ranks end with identical bits.
#include <algorithm>
#include <vector>

#include "algo/algorithm.h"
#include "algo/patterns.h"

namespace chorus::algo {
namespace {

// Which ranks share which host, as this rank sees it.
struct Hosts {
  std::vector<std::vector<int>> ranks;  // per host, ascending
  int host = 0;                         // this rank's host
  int local = 0;                        // this rank's local index
  int rails = 0;                        // m: the fewest ranks of any host
};

Hosts group_hosts(const Context& c) {
  Hosts h;
  for (int r = 0; r < c.size; ++r) {
    const int host = c.host_of.empty() ? 0 : c.host_of[r];
    if (host >= static_cast<int>(h.ranks.size())) h.ranks.resize(host + 1);
    if (r == c.rank) {
      h.host = host;
      h.local = static_cast<int>(h.ranks[host].size());
    }
    h.ranks[host].push_back(r);
  }
  h.rails = c.size;
  for (const auto& v : h.ranks) h.rails = std::min(h.rails, static_cast<int>(v.size()));
  return h;
}

// In-place ring all-reduce of buf[0..count) among `group` (global ranks); this rank is
// group[pos]. Same scheme as all_reduce_ring over a sub-group.
void ring_over(Context& c, const std::vector<int>& group, int pos, std::byte* buf, size_t count,
               DataType dtype, ReduceOp op) {
  const int n = static_cast<int>(group.size());
  const int next = group[mod(pos + 1, n)], prev = group[mod(pos - 1, n)];
  const size_t es = dtype_size(dtype);
  auto seg = [&](int i) { return segment(count, n, mod(i, n)); };
  for (int s = 0; s < n - 1; ++s) {  // reduce-scatter: segment pos+1 ends complete here
    auto [so, sc] = seg(pos - s);
    auto [ro, rc] = seg(pos - s - 1);
    c.ex.post_send(next, buf + so * es, sc * es);
    c.ex.post_recv_reduce(prev, buf + ro * es, buf + ro * es, rc, dtype, op);
    c.ex.wait_all();
  }
  for (int s = 0; s < n - 1; ++s) {  // all-gather: pass the complete segments on
    auto [so, sc] = seg(pos + 1 - s);
    auto [ro, rc] = seg(pos - s);
    c.ex.post_send(next, buf + so * es, sc * es);
    c.ex.post_recv(prev, buf + ro * es, rc * es);
    c.ex.wait_all();
  }
}

}  // namespace

void all_reduce_hier(Context& c, const CollArgs& a) {
  const Hosts h = group_hosts(c);
  const std::vector<int>& mine = h.ranks[h.host];
  const int m = h.rails, nh = static_cast<int>(h.ranks.size());
  const int local_n = static_cast<int>(mine.size());
  const bool owner = h.local < m;
  const size_t es = a.elem();
  const ReduceOp op = travel_op(a.op);
  const size_t round = chunk_elems(c, a.dtype) * static_cast<size_t>(m) * nh;
  // The ranks of rail `local` on every host, in host order: step 2's ring.
  std::vector<int> rail;
  if (owner)
    for (const auto& v : h.ranks) rail.push_back(v[h.local]);
  std::vector<const void*> srcs(local_n);

  for (size_t base = 0; base < a.count; base += round) {
    const size_t len = std::min(round, a.count - base);
    auto slice = [&](int i) {
      auto [off, cnt] = segment(len, m, i);
      return std::pair<size_t, size_t>{base + off, cnt};
    };
    const auto [my_off, my_cnt] = owner ? slice(h.local) : std::pair<size_t, size_t>{0, 0};
    std::byte* inbox = c.scratch.get(0, std::max<size_t>(1, my_cnt * es * local_n));

    c.ex.step("intra-host reduce-scatter");
    for (int i = 0; i < m; ++i) {
      if (i == h.local) continue;
      auto [off, cnt] = slice(i);
      c.ex.post_send(mine[i], a.send + off * es, cnt * es);
    }
    if (owner)
      for (int k = 0; k < local_n; ++k)
        if (k != h.local) c.ex.post_recv(mine[k], inbox + k * my_cnt * es, my_cnt * es);
    c.ex.wait_all();
    if (owner) {
      for (int k = 0; k < local_n; ++k)
        srcs[k] = k == h.local ? a.send + my_off * es : inbox + k * my_cnt * es;
      if (local_n == 1)
        copy_if_distinct(a, a.recv + my_off * es, a.send + my_off * es, my_cnt * es);
      else if (my_cnt > 0)
        reduce_n(a, a.recv + my_off * es, srcs.data(), local_n, my_cnt);
    }

    c.ex.step("inter-host all-reduce");
    if (owner && nh > 1) ring_over(c, rail, h.host, a.recv + my_off * es, my_cnt, a.dtype, op);

    c.ex.step("intra-host all-gather");
    for (int i = 0; i < m; ++i) {
      if (i == h.local) continue;
      auto [off, cnt] = slice(i);
      c.ex.post_recv(mine[i], a.recv + off * es, cnt * es);
    }
    if (owner)
      for (int k = 0; k < local_n; ++k)
        if (k != h.local) c.ex.post_send(mine[k], a.recv + my_off * es, my_cnt * es);
    c.ex.wait_all();
  }
  finish_avg(a, a.recv, a.count, c.size);
}

}  // namespace chorus::algo
