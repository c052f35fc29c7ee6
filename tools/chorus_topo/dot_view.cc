// The picture: one cluster per socket holding its NUMA nodes and their PCIe trees, GPUs green,
// NICs orange. A complete set of GPU links (an NVSwitch fabric) is drawn as one hub instead of
// n(n-1)/2 edges, so an 8-GPU host stays legible.
#include <sstream>

#include "views.h"

namespace chorus::topo::cli {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

size_t cores_under(const Topology& host, int node) {
  size_t n = 0;
  for (const Core& c : host.cores)
    n += c.numa >= 0 && (c.numa == node || host.ancestor(c.numa, NodeKind::kPackage) == node);
  return n;
}

std::string node_line(const Topology& host, int id) {
  const Node& n = host.nodes[static_cast<size_t>(id)];
  std::string text, fill, shape = "box";
  switch (n.kind) {
    case NodeKind::kMachine:
      text = host.hostname + "\\n" + format_bytes(host.memory_bytes());
      fill = "#ffffff";
      break;
    case NodeKind::kPackage:
      text = n.name + (n.detail.empty() ? "" : "\\n" + escape(n.detail)) + "\\n" +
             std::to_string(cores_under(host, id)) + " cores, PUs " + n.cpus;
      fill = "#9fc5e8";
      break;
    case NodeKind::kNumaNode:
      text = n.name + "\\n" + format_bytes(n.memory_bytes) + ", PUs " + n.cpus;
      fill = "#cfe2f3";
      break;
    case NodeKind::kHostBridge:
      text = "Host bridge\\n" + n.detail;
      fill = "#eeeeee";
      break;
    case NodeKind::kPciSwitch:
      text = "PCIe switch\\n" + n.pci_bus_id;
      fill = "#d9d9d9";
      shape = "box3d";
      break;
    case NodeKind::kGpu:
      text = n.name + "\\n" + escape(n.detail) + "\\n" + n.pci_bus_id;
      fill = "#b6d7a8";
      break;
    case NodeKind::kNic:
      text =
          n.name + (n.detail.empty() ? "" : " (" + escape(n.detail) + ")") + "\\n" + n.pci_bus_id;
      fill = "#f9cb9c";
      shape = "component";
      break;
  }
  return "n" + std::to_string(id) + " [label=\"" + text + "\", shape=" + shape + ", fillcolor=\"" +
         fill + "\"];\n";
}

}  // namespace

std::string to_dot(const Topology& host) {
  std::ostringstream os;
  os << "digraph \"" << escape(host.hostname) << "\" {\n"
     << "  graph [rankdir=TB, fontname=\"Helvetica\", nodesep=0.3, ranksep=0.5, label=\""
     << escape(host.hostname) << " (chorus-topo)\", labelloc=t];\n"
     << "  node [style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=11];\n"
     << "  edge [arrowhead=none, color=\"#666666\", fontname=\"Helvetica\", fontsize=10];\n";
  // Nodes: each package's subtree in its own cluster.
  for (size_t i = 0; i < host.nodes.size(); ++i) {
    const int id = static_cast<int>(i);
    if (host.nodes[i].kind == NodeKind::kPackage) {
      os << "  subgraph cluster_" << id
         << " {\n    style=\"rounded,filled\"; fillcolor=\"#f3f8fc\"; "
         << "color=\"#6fa8dc\"; label=\"Socket " << host.nodes[i].os_index << "\";\n";
      for (size_t j = i; j < host.nodes.size(); ++j)
        if (host.ancestor(static_cast<int>(j), NodeKind::kPackage) == id)
          os << "    " << node_line(host, static_cast<int>(j));
      os << "  }\n";
    } else if (host.ancestor(id, NodeKind::kPackage) < 0) {
      os << "  " << node_line(host, id);
    }
  }
  for (size_t i = 1; i < host.nodes.size(); ++i)
    os << "  n" << host.nodes[i].parent << " -> n" << i << ";\n";
  const std::vector<int> packages = host.packages();
  for (size_t i = 0; i + 1 < packages.size(); ++i)
    os << "  n" << packages[i] << " -> n" << packages[i + 1]
       << " [style=bold, color=\"#3d85c6\", label=\"socket link\", constraint=false];\n";
  // GPU links.
  const size_t gpus = host.gpus().size();
  if (gpus > 2 && host.gpu_links.size() == gpus * (gpus - 1) / 2) {
    os << "  fabric [label=\"" << host.gpu_link_name << " fabric\\n"
       << host.gpu_links[0].gbps << " GB/s per GPU\", shape=hexagon, fillcolor=\"#93c47d\"];\n";
    for (int g : host.gpus()) os << "  n" << g << " -> fabric [color=\"#38761d\", style=dashed];\n";
  } else {
    for (const GpuLink& l : host.gpu_links)
      os << "  n" << l.a << " -> n" << l.b << " [color=\"#38761d\", style=dashed, label=\""
         << l.gbps << " GB/s\", constraint=false];\n";
  }
  os << "}\n";
  return os.str();
}

}  // namespace chorus::topo::cli
