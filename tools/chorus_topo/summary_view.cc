#include <set>
#include <sstream>

#include "views.h"

namespace chorus::topo::cli {
namespace {

size_t count_cores(const Topology& host, int numa) {
  size_t n = 0;
  for (const Core& c : host.cores) n += c.numa == numa;
  return n;
}

std::string describe(const Topology& host, int id) {
  const Node& n = host.nodes[static_cast<size_t>(id)];
  std::ostringstream os;
  switch (n.kind) {
    case NodeKind::kMachine:
      os << "Machine " << host.hostname << " (" << format_bytes(host.memory_bytes()) << ")";
      break;
    case NodeKind::kPackage:
      os << n.name << (n.detail.empty() ? "" : " (" + n.detail + ")") << ", PUs " << n.cpus;
      break;
    case NodeKind::kNumaNode:
      os << n.name << ": " << format_bytes(n.memory_bytes) << ", " << count_cores(host, id)
         << " cores, PUs " << n.cpus;
      break;
    case NodeKind::kHostBridge:
    case NodeKind::kPciSwitch:
      os << n.name;
      break;
    case NodeKind::kGpu:
    case NodeKind::kNic:
      os << n.name << "  " << n.pci_bus_id << "  " << n.detail;
      break;
  }
  return os.str();
}

}  // namespace

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  std::ostringstream os;
  os.precision(value < 10 && unit > 0 && value != static_cast<uint64_t>(value) ? 2 : 4);
  os << value << " " << kUnits[unit];
  return os.str();
}

std::string label(const Node& node) {
  std::string out;
  for (char c : node.name)
    if (c != ' ') out += c;
  return out;
}

void print_summary(std::ostream& os, const Topology& host) {
  std::set<std::string> models;
  for (int p : host.packages())
    if (!host.nodes[static_cast<size_t>(p)].detail.empty())
      models.insert(host.nodes[static_cast<size_t>(p)].detail);
  os << "Host " << host.hostname << ": " << host.packages().size() << " socket(s), "
     << host.numa_nodes().size() << " NUMA node(s), " << host.cores.size() << " cores, "
     << host.pu_count() << " PUs, " << format_bytes(host.memory_bytes()) << " memory\n";
  for (const std::string& m : models) os << "CPU:    " << m << "\n";
  os << "Caches:";
  for (size_t i = 0; i < host.caches.size(); ++i)
    os << (i ? ", " : " ") << host.caches[i].name << " " << format_bytes(host.caches[i].bytes)
       << " x " << host.caches[i].count;
  os << (host.caches.empty() ? " none reported\n" : "\n");
  os << "GPUs:   " << host.gpus().size() << ", NICs: " << host.nics().size();
  if (!host.gpu_links.empty()) {
    double min = host.gpu_links[0].gbps, max = min;
    for (const GpuLink& l : host.gpu_links)
      min = std::min(min, l.gbps), max = std::max(max, l.gbps);
    os << ", " << host.gpu_link_name << " between " << host.gpu_links.size() << " GPU pairs ("
       << min << (min == max ? "" : "-" + std::to_string(static_cast<int>(max))) << " GB/s)";
  }
  os << "\n\n";
  // The tree: depth first, so each node follows its parent.
  std::vector<int> depth(host.nodes.size(), 0);
  for (size_t i = 0; i < host.nodes.size(); ++i) {
    const int parent = host.nodes[i].parent;
    depth[i] = parent < 0 ? 0 : depth[static_cast<size_t>(parent)] + 1;
    os << std::string(static_cast<size_t>(depth[i]) * 2, ' ') << describe(host, static_cast<int>(i))
       << "\n";
  }
}

}  // namespace chorus::topo::cli
