// Placement: slots per host, the candidate layouts, and the cost model that picks one.
// placement.h states the rules; this file keeps them.
#include "chorus/topo/placement.h"

#include <algorithm>
#include <limits>
#include <map>

#include "chorus/error.h"
#include "chorus/topo/ring_order.h"

namespace chorus::topo {
namespace {

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

int check_fits(const Mesh& mesh, std::span<const Topology> hosts) {
  CHORUS_ARG_CHECK(!hosts.empty(), "placement needs at least one host");
  const int world = mesh.world_size();
  const int nhosts = static_cast<int>(hosts.size());
  CHORUS_ARG_CHECK(world % nhosts == 0, "mesh dp=", mesh.dp, ",tp=", mesh.tp, ",pp=", mesh.pp,
                   " has ", world, " ranks, not a multiple of the ", nhosts, " hosts");
  const int per_host = world / nhosts;
  CHORUS_ARG_CHECK(mesh.tp <= per_host, "tp=", mesh.tp, " is larger than a host: ", nhosts,
                   " hosts x ", per_host, " ranks (tensor-parallel groups must not span hosts)");
  for (const Topology& h : hosts) {
    const size_t gpus = h.gpus().size();
    CHORUS_ARG_CHECK(gpus == 0 || gpus >= static_cast<size_t>(per_host), "host '", h.hostname,
                     "' has ", gpus, " GPUs for ", per_host, " ranks per host");
  }
  return per_host;
}

Placement assemble(const Mesh& mesh, std::span<const Topology> hosts,
                   std::vector<Slot> slot_of_rank, std::string layout, const CostModel& model) {
  Placement p;
  p.mesh = mesh;
  p.layout = std::move(layout);
  p.cost = placement_cost(mesh, hosts, slot_of_rank, model);
  p.naive_cost = p.cost;
  for (int r = 0; r < mesh.world_size(); ++r)
    p.ranks.push_back({r, mesh.coord_of(r), std::move(slot_of_rank[static_cast<size_t>(r)])});
  return p;
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

double placement_cost(const Mesh& mesh, std::span<const Topology> hosts,
                      std::span<const Slot> slot_of_rank, const CostModel& model) {
  CHORUS_ARG_CHECK(slot_of_rank.size() == static_cast<size_t>(mesh.world_size()),
                   "placement_cost: ", slot_of_rank.size(), " slots for ", mesh.world_size(),
                   " ranks");
  double total = 0;
  for (Axis axis : {Axis::kTp, Axis::kDp, Axis::kPp}) {
    const double weight = axis == Axis::kTp   ? model.tp_weight
                          : axis == Axis::kDp ? model.dp_weight
                                              : model.pp_weight;
    for (int r = 0; r < mesh.world_size(); ++r) {
      MeshCoord c = mesh.coord_of(r);
      if (c[axis] != 0) continue;  // each group once, from its first member
      std::vector<const Slot*> members;
      for (int i = 0; i < mesh.size(axis); ++i) {
        c[axis] = i;
        members.push_back(&slot_of_rank[static_cast<size_t>(mesh.rank_of(c))]);
      }
      total += weight * group_cost(hosts, members, axis != Axis::kPp);
    }
  }
  return total;
}

Placement naive_placement(const Mesh& mesh, std::span<const Topology> hosts,
                          const CostModel& model) {
  const int per_host = check_fits(mesh, hosts);
  std::vector<Slot> slots = all_slots(hosts, per_host);
  // Device-index order within each host: GPUs by runtime ordinal (CPU slots are in core order).
  for (size_t h = 0; h < hosts.size(); ++h) {
    const auto first =
        slots.begin() + static_cast<std::ptrdiff_t>(h * static_cast<size_t>(per_host));
    std::stable_sort(first, first + per_host,
                     [](const Slot& a, const Slot& b) { return a.gpu < b.gpu; });
    for (int i = 0; i < per_host; ++i) first[i].local = i;
  }
  return assemble(mesh, hosts, std::move(slots), "naive", model);
}

Placement place(const Mesh& mesh, std::span<const Topology> hosts, const CostModel& model) {
  const int per_host = check_fits(mesh, hosts);
  const std::vector<Slot> slots = all_slots(hosts, per_host);
  // TP innermost always; PP before DP is preferred on equal cost (listed first).
  const std::array<std::array<Axis, 3>, 2> nestings = {
      {{Axis::kTp, Axis::kPp, Axis::kDp}, {Axis::kTp, Axis::kDp, Axis::kPp}}};
  Placement best = naive_placement(mesh, hosts, model);
  const double naive_cost = best.cost;
  bool have_candidate = false;
  for (const auto& nesting : nestings) {
    std::vector<Slot> slot_of_rank(slots.size());
    for (int r = 0; r < mesh.world_size(); ++r) {
      const MeshCoord c = mesh.coord_of(r);
      const int g = c[nesting[0]] +
                    mesh.size(nesting[0]) * (c[nesting[1]] + mesh.size(nesting[1]) * c[nesting[2]]);
      slot_of_rank[static_cast<size_t>(r)] = slots[static_cast<size_t>(g)];
    }
    const std::string name = std::string(to_string(nesting[0])) + "," +
                             std::string(to_string(nesting[1])) + "," +
                             std::string(to_string(nesting[2]));
    Placement candidate = assemble(mesh, hosts, std::move(slot_of_rank), name, model);
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
