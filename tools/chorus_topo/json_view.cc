#include <cstdio>

#include "views.h"

namespace chorus::topo::cli {
namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

template <class T, class F>
void list(std::ostream& os, const std::vector<T>& items, F each) {
  os << "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) os << ", ";
    each(items[i]);
  }
  os << "]";
}

void print_host(std::ostream& os, const Topology& h) {
  os << "{\"hostname\": " << quote(h.hostname) << ", \"sockets\": " << h.packages().size()
     << ", \"numa_nodes\": " << h.numa_nodes().size() << ", \"cores\": " << h.cores.size()
     << ", \"pus\": " << h.pu_count() << ", \"memory_bytes\": " << h.memory_bytes()
     << ",\n  \"caches\": ";
  list(os, h.caches, [&](const CacheLevel& c) {
    os << "{\"name\": " << quote(c.name) << ", \"bytes\": " << c.bytes << ", \"count\": " << c.count
       << "}";
  });
  os << ",\n  \"nodes\": [\n";
  for (size_t i = 0; i < h.nodes.size(); ++i) {
    const Node& n = h.nodes[i];
    os << "    {\"id\": " << i << ", \"kind\": " << quote(std::string(to_string(n.kind)))
       << ", \"parent\": " << n.parent << ", \"name\": " << quote(n.name)
       << ", \"detail\": " << quote(n.detail) << ", \"pci_bus_id\": " << quote(n.pci_bus_id)
       << ", \"cpus\": " << quote(n.cpus);
    if (n.kind == NodeKind::kNumaNode) os << ", \"memory_bytes\": " << n.memory_bytes;
    if (n.os_index >= 0) os << ", \"os_index\": " << n.os_index;
    os << "}" << (i + 1 < h.nodes.size() ? ",\n" : "\n");
  }
  os << "  ],\n  \"gpu_links\": ";
  list(os, h.gpu_links, [&](const GpuLink& l) {
    os << "{\"a\": " << l.a << ", \"b\": " << l.b << ", \"gbps\": " << l.gbps << "}";
  });
  os << "}";
}

}  // namespace

void print_json(std::ostream& os, const Topology& h, const PlacedMesh* placed,
                std::span<const Topology> hosts) {
  os << "{\"host\": ";
  print_host(os, h);
  const std::vector<int> endpoints = h.endpoints();
  os << ",\n \"matrix\": {\"endpoints\": ";
  list(os, endpoints, [&](int e) { os << quote(label(h.nodes[static_cast<size_t>(e)])); });
  os << ",\n  \"classes\": [";
  for (size_t i = 0; i < endpoints.size(); ++i) {
    os << (i ? ",\n   " : "\n   ");
    list(os, endpoints,
         [&](int col) { os << quote(std::string(code(h.link(endpoints[i], col)))); });
  }
  os << "]},\n \"legend\": {";
  for (size_t i = 0; i < std::size(kAllLinkClasses); ++i)
    os << (i ? ", " : "") << quote(std::string(code(kAllLinkClasses[i]))) << ": "
       << quote(std::string(description(kAllLinkClasses[i])));
  os << "}";
  if (placed != nullptr) {
    const parallel::MeshShape& m = placed->shape;
    const Placement& p = placed->placement;
    os << ",\n \"placement\": {\"dp\": " << m.dp << ", \"tp\": " << m.tp << ", \"pp\": " << m.pp
       << ", \"order\": " << quote(m.order_string()) << ", \"hosts\": " << hosts.size()
       << ", \"layout\": " << quote(p.layout) << ", \"cost\": " << p.cost
       << ", \"naive_cost\": " << p.naive_cost << ",\n  \"ranks\": [";
    for (size_t i = 0; i < p.ranks.size(); ++i) {
      const RankPlacement& r = p.ranks[i];
      const Topology& host = hosts[static_cast<size_t>(r.slot.host)];
      auto name = [&](int node) {
        return node < 0 ? std::string() : label(host.nodes[static_cast<size_t>(node)]);
      };
      const parallel::MeshCoord c = m.coord_of(r.rank);
      os << (i ? ",\n   " : "\n   ") << "{\"rank\": " << r.rank << ", \"dp\": " << c.dp
         << ", \"tp\": " << c.tp << ", \"pp\": " << c.pp << ", \"host\": " << r.slot.host
         << ", \"hostname\": " << quote(host.hostname) << ", \"local\": " << r.slot.local
         << ", \"gpu\": " << r.slot.gpu << ", \"endpoint\": " << quote(name(r.slot.node))
         << ", \"nic\": " << quote(name(r.slot.nic))
         << ", \"cpus\": " << quote(format_cpu_list(r.slot.pus)) << "}";
    }
    os << "],\n  \"ring\": ";
    list(os, job_ring(p, hosts), [&](int r) { os << r; });
    os << "}";
  }
  os << "}\n";
}

}  // namespace chorus::topo::cli
