#include <iomanip>

#include "chorus/topo/ring_order.h"
#include "views.h"

namespace chorus::topo::cli {

std::vector<int> job_ring(const Placement& placement, std::span<const Topology> hosts) {
  std::vector<Endpoint> members;
  for (const RankPlacement& r : placement.ranks) members.push_back({r.slot.host, r.slot.node});
  return ring_order(members, hosts);
}

void print_placement(std::ostream& os, const PlacedMesh& placed, std::span<const Topology> hosts) {
  const parallel::MeshShape& m = placed.shape;
  const Placement& p = placed.placement;
  os << "Mesh dp=" << m.dp << " tp=" << m.tp << " pp=" << m.pp << " (rank order "
     << m.order_string() << ", fastest first) on " << hosts.size() << " host(s) x "
     << m.world_size() / static_cast<int>(hosts.size()) << " ranks\n";
  os << "Layout " << p.layout << " (innermost first); cost " << p.cost << ", naive order "
     << p.naive_cost << "\n\n";
  os << std::left << std::setw(6) << "rank" << std::setw(4) << "dp" << std::setw(4) << "tp"
     << std::setw(4) << "pp" << std::setw(16) << "host" << std::setw(7) << "local" << std::setw(8)
     << "device" << std::setw(8) << "numa" << std::setw(10) << "nic"
     << "cpus\n";
  for (const RankPlacement& r : p.ranks) {
    const Topology& host = hosts[static_cast<size_t>(r.slot.host)];
    auto name = [&](int node) {
      return node < 0 ? std::string("-") : label(host.nodes[static_cast<size_t>(node)]);
    };
    const int numa = r.slot.node < 0 ? -1 : host.numa_of(r.slot.node);
    const parallel::MeshCoord c = m.coord_of(r.rank);
    os << std::left << std::setw(6) << r.rank << std::setw(4) << c.dp << std::setw(4) << c.tp
       << std::setw(4) << c.pp << std::setw(16) << host.hostname << std::setw(7) << r.slot.local
       << std::setw(8) << (r.slot.gpu >= 0 ? name(r.slot.node) : "cpu") << std::setw(8)
       << name(numa) << std::setw(10) << name(r.slot.nic) << format_cpu_list(r.slot.pus) << "\n";
  }
  os << "\nRing order:";
  for (int r : job_ring(p, hosts)) os << " " << r;
  os << "\n";
}

}  // namespace chorus::topo::cli
