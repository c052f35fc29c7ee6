#include "chorus/topo/topology.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <tuple>

#include "chorus/error.h"

namespace chorus::topo {

std::string_view to_string(NodeKind kind) {
  switch (kind) {
    case NodeKind::kMachine:
      return "machine";
    case NodeKind::kPackage:
      return "package";
    case NodeKind::kNumaNode:
      return "numa";
    case NodeKind::kHostBridge:
      return "host_bridge";
    case NodeKind::kPciSwitch:
      return "pci_switch";
    case NodeKind::kGpu:
      return "gpu";
    case NodeKind::kNic:
      return "nic";
  }
  return "?";
}

std::string_view code(LinkClass c) {
  switch (c) {
    case LinkClass::kSelf:
      return "X";
    case LinkClass::kGpuLink:
      return "NV";
    case LinkClass::kPciSwitch:
      return "PIX";
    case LinkClass::kHostBridge:
      return "PHB";
    case LinkClass::kNumaNode:
      return "NODE";
    case LinkClass::kPackage:
      return "PKG";
    case LinkClass::kSystem:
      return "SYS";
    case LinkClass::kNetwork:
      return "NET";
  }
  return "?";
}

std::string_view description(LinkClass c) {
  switch (c) {
    case LinkClass::kSelf:
      return "the same device or NUMA node";
    case LinkClass::kGpuLink:
      return "a direct GPU link (NVLink, xGMI)";
    case LinkClass::kPciSwitch:
      return "through PCIe switches, not the host bridge";
    case LinkClass::kHostBridge:
      return "through a PCIe host bridge (the CPU's root complex)";
    case LinkClass::kNumaNode:
      return "within a NUMA node, across PCIe host bridges";
    case LinkClass::kPackage:
      return "across NUMA nodes of one socket";
    case LinkClass::kSystem:
      return "across sockets (UPI, Infinity Fabric)";
    case LinkClass::kNetwork:
      return "across hosts, through the network";
  }
  return "?";
}

double link_cost(LinkClass c) {
  // Roughly 1 / bandwidth, normalised to NVLink: NVLink ~300 GB/s, a PCIe 4 x16 path ~25 GB/s
  // through a switch, less through the root complex and the socket interconnect, a 200 Gb/s
  // NIC ~12 GB/s.
  switch (c) {
    case LinkClass::kSelf:
      return 0;
    case LinkClass::kGpuLink:
      return 1;
    case LinkClass::kPciSwitch:
      return 4;
    case LinkClass::kHostBridge:
      return 5;
    case LinkClass::kNumaNode:
      return 6;
    case LinkClass::kPackage:
      return 8;
    case LinkClass::kSystem:
      return 10;
    case LinkClass::kNetwork:
      return 24;
  }
  return 0;
}

uint64_t Topology::memory_bytes() const {
  uint64_t total = 0;
  for (const Node& n : nodes)
    if (n.kind == NodeKind::kNumaNode) total += n.memory_bytes;
  return total;
}

int Topology::pu_count() const {
  int count = 0;
  for (const Core& c : cores) count += static_cast<int>(c.pus.size());
  return count;
}

std::vector<int> Topology::nodes_of(NodeKind kind) const {
  std::vector<int> out;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].kind == kind) out.push_back(static_cast<int>(i));
  return out;
}

std::vector<int> Topology::endpoints() const {
  std::vector<int> out = gpus();
  for (int n : nics()) out.push_back(n);
  for (int n : numa_nodes()) out.push_back(n);
  return out;
}

int Topology::ancestor(int node, NodeKind kind) const {
  for (; node >= 0; node = nodes[static_cast<size_t>(node)].parent)
    if (nodes[static_cast<size_t>(node)].kind == kind) return node;
  return -1;
}

int Topology::numa_of(int node) const {
  if (int numa = ancestor(node, NodeKind::kNumaNode); numa >= 0) return numa;
  // Depth-first order: a subtree is the contiguous run of ids whose ancestry includes its root.
  for (int up = node; up >= 0; up = nodes[static_cast<size_t>(up)].parent)
    for (size_t i = static_cast<size_t>(up) + 1; i < nodes.size(); ++i) {
      if (nodes[i].kind == NodeKind::kNumaNode &&
          ancestor(static_cast<int>(i), nodes[up].kind) == up)
        return static_cast<int>(i);
    }
  return -1;
}

const GpuLink* Topology::gpu_link(int a, int b) const {
  if (a > b) std::swap(a, b);
  for (const GpuLink& l : gpu_links)
    if (l.a == a && l.b == b) return &l;
  return nullptr;
}

LinkClass Topology::link(int a, int b) const {
  if (a == b) return LinkClass::kSelf;
  if (gpu_link(a, b) != nullptr) return LinkClass::kGpuLink;
  // The lowest common ancestor decides: what both paths must go through.
  std::vector<int> above_a;
  for (int n = a; n >= 0; n = nodes[static_cast<size_t>(n)].parent) above_a.push_back(n);
  int common = -1;
  for (int n = b; n >= 0 && common < 0; n = nodes[static_cast<size_t>(n)].parent)
    if (std::find(above_a.begin(), above_a.end(), n) != above_a.end()) common = n;
  CHORUS_CHECK(common >= 0, "nodes ", a, " and ", b, " share no root");
  switch (nodes[static_cast<size_t>(common)].kind) {
    case NodeKind::kPciSwitch:
      return LinkClass::kPciSwitch;
    case NodeKind::kHostBridge:
      return LinkClass::kHostBridge;
    case NodeKind::kNumaNode:
      return LinkClass::kNumaNode;
    case NodeKind::kPackage:
      return LinkClass::kPackage;
    case NodeKind::kMachine:
      return LinkClass::kSystem;
    case NodeKind::kGpu:
    case NodeKind::kNic:
      return LinkClass::kPciSwitch;  // a device and a function below it
  }
  return LinkClass::kSystem;
}

void Topology::validate() const {
  CHORUS_ARG_CHECK(!nodes.empty() && nodes[0].kind == NodeKind::kMachine && nodes[0].parent == -1,
                   "topology of '", hostname, "': node 0 must be the machine");
  const int n = static_cast<int>(nodes.size());
  for (int i = 1; i < n; ++i) {
    const Node& node = nodes[static_cast<size_t>(i)];
    CHORUS_ARG_CHECK(node.parent >= 0 && node.parent < i, "topology of '", hostname, "': node ", i,
                     " has parent ", node.parent, " (parents must precede children)");
    CHORUS_ARG_CHECK(node.kind != NodeKind::kMachine, "topology of '", hostname,
                     "': more than one machine node");
  }
  for (const Core& c : cores)
    CHORUS_ARG_CHECK(
        c.numa == -1 || (c.numa >= 0 && c.numa < n &&
                         nodes[static_cast<size_t>(c.numa)].kind == NodeKind::kNumaNode),
        "topology of '", hostname, "': a core names ", c.numa, " as its NUMA node");
  for (const GpuLink& l : gpu_links)
    CHORUS_ARG_CHECK(l.a >= 0 && l.a < l.b && l.b < n &&
                         nodes[static_cast<size_t>(l.a)].kind == NodeKind::kGpu &&
                         nodes[static_cast<size_t>(l.b)].kind == NodeKind::kGpu,
                     "topology of '", hostname, "': a GPU link joins nodes ", l.a, " and ", l.b);
}

void sort_depth_first(Topology& t) {
  const size_t n = t.nodes.size();
  std::vector<std::vector<int>> children(n);
  int root = -1;
  for (size_t i = 0; i < n; ++i) {
    if (t.nodes[i].parent < 0) {
      CHORUS_CHECK(root < 0, "two roots in the topology of ", t.hostname);
      root = static_cast<int>(i);
    } else {
      children[static_cast<size_t>(t.nodes[i].parent)].push_back(static_cast<int>(i));
    }
  }
  CHORUS_CHECK(root >= 0, "no root in the topology of ", t.hostname);
  std::vector<int> order;  // new id -> old id
  std::function<void(int)> visit = [&](int old) {
    order.push_back(old);
    for (int c : children[static_cast<size_t>(old)]) visit(c);
  };
  visit(root);
  CHORUS_CHECK_EQ(order.size(), n, "the topology of ", t.hostname, " has a cycle");
  std::vector<int> new_id(n);
  for (size_t i = 0; i < n; ++i) new_id[static_cast<size_t>(order[i])] = static_cast<int>(i);
  auto remap = [&new_id](int id) { return id < 0 ? id : new_id[static_cast<size_t>(id)]; };

  std::vector<Node> sorted;
  sorted.reserve(n);
  for (int old : order) {
    sorted.push_back(std::move(t.nodes[static_cast<size_t>(old)]));
    sorted.back().parent = remap(sorted.back().parent);
  }
  t.nodes = std::move(sorted);
  for (Core& c : t.cores) c.numa = remap(c.numa);
  for (GpuLink& l : t.gpu_links) {
    l.a = remap(l.a);
    l.b = remap(l.b);
    if (l.a > l.b) std::swap(l.a, l.b);
  }
  std::sort(t.gpu_links.begin(), t.gpu_links.end(), [](const GpuLink& x, const GpuLink& y) {
    return std::tie(x.a, x.b) < std::tie(y.a, y.b);
  });
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::vector<int> sorted = cpus;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(sorted[i]);
    if (j > i) out += '-' + std::to_string(sorted[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> parse_cpu_list(std::string_view text) {
  std::vector<int> out;
  auto number = [&text](std::string_view part) {
    int value = -1;
    auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    CHORUS_ARG_CHECK(ec == std::errc() && ptr == part.data() + part.size() && value >= 0,
                     "malformed CPU list '", text, "'");
    return value;
  };
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view part = text.substr(start, end - start);
    const size_t dash = part.find('-');
    const int first = number(part.substr(0, dash));
    const int last = dash == std::string_view::npos ? first : number(part.substr(dash + 1));
    CHORUS_ARG_CHECK(first <= last, "malformed CPU list '", text, "'");
    for (int c = first; c <= last; ++c) out.push_back(c);
    start = end + 1;
  }
  return out;
}

}  // namespace chorus::topo
