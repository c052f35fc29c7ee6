// Placement: slots per host, the candidate layouts, and the cost model that picks one.
// placement.h states the rules; this file keeps them.
#include "chorus/topo/placement.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>

#include "chorus/error.h"
#include "chorus/topo/ring_order.h"

namespace chorus::topo {
namespace {

// The most ranks a grid may have: beyond every job, and small enough for int arithmetic.
constexpr int64_t kMaxRanks = 1 << 24;
// place() tries (axes - 1)! nestings; 8 axes are 5040, past any real mesh.
constexpr size_t kMaxAxes = 8;

// Item i of `count` fair shares of `items`: contiguous runs, or round-robin when there are
// more shares than items.
template <class T>
std::vector<T> share(const std::vector<T>& items, size_t i, size_t count) {
  if (items.empty()) return {};
  if (count > items.size()) return {items[i * items.size() / count]};
  return std::vector<T>(
      items.begin() + static_cast<std::ptrdiff_t>(i * items.size() / count),
      items.begin() + static_cast<std::ptrdiff_t>((i + 1) * items.size() / count));
}

std::vector<int> pus_of(const std::vector<Core>& cores) {
  std::vector<int> out;
  for (const Core& c : cores) out.insert(out.end(), c.pus.begin(), c.pus.end());
  return out;
}

int nearest_nic(const Topology& host, int node) {
  int best = -1;
  for (int nic : host.nics())
    if (best < 0 || (node >= 0 && host.link(node, nic) < host.link(node, best))) best = nic;
  return best;
}

// The cores whose PUs all lie in `cpus` (a list string); every core when none does.
std::vector<Core> cores_within(const Topology& host, const std::string& cpus) {
  const std::vector<int> set = cpus.empty() ? std::vector<int>{} : parse_cpu_list(cpus);
  std::vector<Core> out;
  for (const Core& c : host.cores)
    if (std::all_of(c.pus.begin(), c.pus.end(),
                    [&](int pu) { return std::find(set.begin(), set.end(), pu) != set.end(); }))
      out.push_back(c);
  return out.empty() ? host.cores : out;
}

double group_cost(std::span<const Topology> hosts, const std::vector<const Slot*>& members,
                  bool ring) {
  auto cost = [&](const Slot* a, const Slot* b) {
    return link_cost(link_between(hosts, {a->host, a->node}, {b->host, b->node}));
  };
  const size_t n = members.size();
  if (n < 2) return 0;
  double total = 0;
  for (size_t i = 0; i + 1 < n + (ring ? 1 : 0); ++i) {
    const double c = cost(members[i], members[(i + 1) % n]);
    total = ring ? std::max(total, c) : total + c;
  }
  return ring ? total * 2.0 * static_cast<double>(n - 1) / static_cast<double>(n) : total;
}

// Global slot sequence: hosts in turn, each host's slots in topology order.
std::vector<Slot> all_slots(std::span<const Topology> hosts, int per_host) {
  std::vector<Slot> out;
  for (size_t h = 0; h < hosts.size(); ++h)
    for (Slot& s : host_slots(hosts[h], static_cast<int>(h), per_host)) out.push_back(std::move(s));
  return out;
}

// The axis whose groups go innermost: the heaviest, the first listed on equal weights.
size_t heaviest_axis(const Grid& grid) {
  size_t best = 0;
  for (size_t a = 1; a < grid.axes.size(); ++a)
    if (grid.axes[a].weight > grid.axes[best].weight) best = a;
  return best;
}

int check_fits(const Grid& grid, std::span<const Topology> hosts) {
  CHORUS_ARG_CHECK(!hosts.empty(), "placement needs at least one host");
  CHORUS_ARG_CHECK(!grid.axes.empty() && grid.axes.size() <= kMaxAxes, "grid ", to_string(grid),
                   ": placement takes 1 to ", kMaxAxes, " axes, got ", grid.axes.size());
  int64_t world64 = 1;
  for (size_t a = 0; a < grid.axes.size(); ++a) {
    const GridAxis& axis = grid.axes[a];
    CHORUS_ARG_CHECK(!axis.name.empty() && axis.size >= 1 && axis.weight >= 0, "grid ",
                     to_string(grid), ": axis ", a, " ('", axis.name, "', size ", axis.size,
                     ", weight ", axis.weight,
                     ") needs a name, at least one rank and a weight of at least 0");
    for (size_t b = 0; b < a; ++b)
      CHORUS_ARG_CHECK(grid.axes[b].name != axis.name, "grid ", to_string(grid),
                       ": two axes named ", axis.name);
    world64 *= axis.size;
    CHORUS_ARG_CHECK(world64 <= kMaxRanks, "grid ", to_string(grid), " has more than ", kMaxRanks,
                     " ranks");
  }
  const int world = grid.world_size();
  const int nhosts = static_cast<int>(hosts.size());
  CHORUS_ARG_CHECK(world % nhosts == 0, "grid ", to_string(grid), " has ", world,
                   " ranks, not a multiple of the ", nhosts, " hosts");
  const int per_host = world / nhosts;
  const GridAxis& inner = grid.axes[heaviest_axis(grid)];
  CHORUS_ARG_CHECK(inner.size <= per_host, inner.name, "=", inner.size,
                   " is larger than a host: ", nhosts, " hosts x ", per_host, " ranks (",
                   inner.name, ", the heaviest axis, must not span hosts)");
  for (const Topology& h : hosts) {
    const size_t gpus = h.gpus().size();
    CHORUS_ARG_CHECK(gpus == 0 || gpus >= static_cast<size_t>(per_host), "host '", h.hostname,
                     "' has ", gpus, " GPUs for ", per_host, " ranks per host");
  }
  return per_host;
}

Placement assemble(const Grid& grid, std::span<const Topology> hosts,
                   std::vector<Slot> slot_of_rank, std::string layout) {
  Placement p;
  p.grid = grid;
  p.layout = std::move(layout);
  p.cost = placement_cost(grid, hosts, slot_of_rank);
  p.naive_cost = p.cost;
  for (int r = 0; r < grid.world_size(); ++r)
    p.ranks.push_back({r, grid.coord_of(r), std::move(slot_of_rank[static_cast<size_t>(r)])});
  return p;
}

// The candidate nestings, innermost axis first: the heaviest axis, then every order of the
// others, by decreasing weight first (the first listed on equal weights).
std::vector<std::vector<size_t>> nestings(const Grid& grid) {
  const size_t inner = heaviest_axis(grid);
  std::vector<size_t> others;
  for (size_t a = 0; a < grid.axes.size(); ++a)
    if (a != inner) others.push_back(a);
  std::stable_sort(others.begin(), others.end(),
                   [&](size_t a, size_t b) { return grid.axes[a].weight > grid.axes[b].weight; });
  // Permutations as positions into `others`, so that the first is the weight order.
  std::vector<size_t> pos(others.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = i;
  std::vector<std::vector<size_t>> out;
  do {
    std::vector<size_t> nesting = {inner};
    for (size_t i : pos) nesting.push_back(others[i]);
    out.push_back(std::move(nesting));
  } while (std::next_permutation(pos.begin(), pos.end()));
  return out;
}

}  // namespace

std::vector<Slot> host_slots(const Topology& host, int host_index, int count) {
  CHORUS_ARG_CHECK(count >= 1, "host_slots: count must be positive, got ", count);
  std::vector<Slot> slots(static_cast<size_t>(count));
  const std::vector<int> gpus = host.gpus();
  if (gpus.size() >= static_cast<size_t>(count)) {
    // GPUs in topology order; the cores local to each GPU are shared by the slots whose GPUs
    // have that locality.
    std::map<std::string, std::vector<size_t>> by_locality;
    for (size_t i = 0; i < slots.size(); ++i) {
      const Node& gpu = host.nodes[static_cast<size_t>(gpus[i])];
      slots[i].node = gpus[i];
      slots[i].gpu = gpu.os_index;
      by_locality[gpu.cpus].push_back(i);
    }
    for (const auto& [cpus, members] : by_locality) {
      const std::vector<Core> cores = cores_within(host, cpus);
      for (size_t k = 0; k < members.size(); ++k)
        slots[members[k]].pus = pus_of(share(cores, k, members.size()));
    }
  } else {
    for (size_t i = 0; i < slots.size(); ++i) {
      const std::vector<Core> cores = share(host.cores, i, slots.size());
      slots[i].pus = pus_of(cores);
      slots[i].node = cores.empty() ? host.numa_of(0) : cores.front().numa;
    }
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    slots[i].host = host_index;
    slots[i].local = static_cast<int>(i);
    slots[i].nic = nearest_nic(host, slots[i].node);
  }
  return slots;
}

double placement_cost(const Grid& grid, std::span<const Topology> hosts,
                      std::span<const Slot> slot_of_rank) {
  CHORUS_ARG_CHECK(slot_of_rank.size() == static_cast<size_t>(grid.world_size()),
                   "placement_cost: ", slot_of_rank.size(), " slots for ", grid.world_size(),
                   " ranks");
  double total = 0;
  for (size_t a = 0; a < grid.axes.size(); ++a) {
    const GridAxis& axis = grid.axes[a];
    for (int r = 0; r < grid.world_size(); ++r) {
      std::vector<int> c = grid.coord_of(r);
      if (c[a] != 0) continue;  // each group once, from its first member
      std::vector<const Slot*> members;
      for (int i = 0; i < axis.size; ++i) {
        c[a] = i;
        members.push_back(&slot_of_rank[static_cast<size_t>(grid.rank_of(c))]);
      }
      total += axis.weight * group_cost(hosts, members, axis.pattern == GridAxis::Pattern::kRing);
    }
  }
  return total;
}

Placement naive_placement(const Grid& grid, std::span<const Topology> hosts) {
  const int per_host = check_fits(grid, hosts);
  std::vector<Slot> slots = all_slots(hosts, per_host);
  // Device-index order within each host: GPUs by runtime ordinal (CPU slots are in core order).
  for (size_t h = 0; h < hosts.size(); ++h) {
    const auto first =
        slots.begin() + static_cast<std::ptrdiff_t>(h * static_cast<size_t>(per_host));
    std::stable_sort(first, first + per_host,
                     [](const Slot& a, const Slot& b) { return a.gpu < b.gpu; });
    for (int i = 0; i < per_host; ++i) first[i].local = i;
  }
  return assemble(grid, hosts, std::move(slots), "naive");
}

Placement place(const Grid& grid, std::span<const Topology> hosts) {
  const int per_host = check_fits(grid, hosts);
  const std::vector<Slot> slots = all_slots(hosts, per_host);
  Placement best = naive_placement(grid, hosts);
  const double naive_cost = best.cost;
  bool have_candidate = false;
  for (const std::vector<size_t>& nesting : nestings(grid)) {
    // Rank r takes slot g, its coordinate numbered in the nesting's order (innermost fastest).
    std::vector<Slot> slot_of_rank(slots.size());
    for (int r = 0; r < grid.world_size(); ++r) {
      const std::vector<int> c = grid.coord_of(r);
      int g = 0;
      for (auto it = nesting.rbegin(); it != nesting.rend(); ++it)
        g = g * grid.axes[*it].size + c[*it];
      slot_of_rank[static_cast<size_t>(r)] = slots[static_cast<size_t>(g)];
    }
    std::string name;
    for (size_t a : nesting) name += (name.empty() ? "" : ",") + grid.axes[a].name;
    Placement candidate = assemble(grid, hosts, std::move(slot_of_rank), name);
    // A topology-aware layout wins ties against the naive one.
    if (candidate.cost < best.cost - 1e-9 ||
        (!have_candidate && candidate.cost <= best.cost + 1e-9)) {
      best = std::move(candidate);
      have_candidate = true;
    }
  }
  best.naive_cost = naive_cost;
  return best;
}

}  // namespace chorus::topo
