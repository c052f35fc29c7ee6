#include <algorithm>
#include <iomanip>

#include "views.h"

namespace chorus::topo::cli {

void print_matrix(std::ostream& os, const Topology& host) {
  const std::vector<int> endpoints = host.endpoints();
  size_t width = 5;
  for (int e : endpoints)
    width = std::max(width, label(host.nodes[static_cast<size_t>(e)]).size() + 1);
  auto cell = [&](const std::string& text) {
    os << std::left << std::setw(static_cast<int>(width)) << text;
  };

  os << "Links between the devices and NUMA nodes of " << host.hostname << ":\n\n";
  cell("");
  for (int e : endpoints) cell(label(host.nodes[static_cast<size_t>(e)]));
  os << "CPU Affinity    NUMA Affinity\n";
  for (int row : endpoints) {
    const Node& node = host.nodes[static_cast<size_t>(row)];
    cell(label(node));
    for (int col : endpoints) cell(std::string(code(host.link(row, col))));
    const int numa = host.numa_of(row);
    os << std::left << std::setw(16) << node.cpus
       << (numa >= 0 ? std::to_string(host.nodes[static_cast<size_t>(numa)].os_index) : "N/A")
       << "\n";
  }
  os << "\nLegend:\n";
  for (LinkClass c : kAllLinkClasses) {
    if (c == LinkClass::kNetwork) continue;  // never within one host
    os << "  " << std::left << std::setw(5) << code(c) << "= " << description(c);
    if (c == LinkClass::kGpuLink && !host.gpu_link_name.empty())
      os << "; here " << host.gpu_link_name;
    os << "\n";
  }
}

}  // namespace chorus::topo::cli
