// chorus — the topology of one host as chorus sees it: a small tree of the parts that matter for
// communication (packages, NUMA nodes, PCIe host bridges and switches, GPUs, NICs), the cores,
// the caches, and the GPU-to-GPU links (NVLink, xGMI) that are not part of the PCIe tree.
//
// The tree is plain data: discovery (discover.h) fills it from hwloc, exchange.h moves it
// between ranks, and placement works on it without hwloc. Nodes are stored depth first, so a
// node's subtree is the contiguous range after it and sorting by node id walks the machine from
// one end to the other: neighbours in that order are close in the hardware.
//
// Vocabulary: an *endpoint* is a node between which traffic flows and distances are reported:
// a GPU, a NIC or a NUMA node. A *link class* names the slowest hop on the path between two
// endpoints (see LinkClass).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::topo {

enum class NodeKind : uint8_t {
  kMachine,
  kPackage,  // a CPU socket
  kNumaNode,
  kHostBridge,  // where a PCIe tree leaves the CPU
  kPciSwitch,   // a PCIe bridge with more than one device below it
  kGpu,
  kNic,
};

std::string_view to_string(NodeKind kind);

// How two endpoints are connected, from the fastest to the slowest path. The order is the order
// of expected bandwidth; link_cost() gives the cost model's numbers.
enum class LinkClass : uint8_t {
  kSelf,        // X     the same endpoint
  kGpuLink,     // NV    NVLink or xGMI between two GPUs
  kPciSwitch,   // PIX   through one PCIe switch, without the host bridge
  kHostBridge,  // PHB   through a PCIe host bridge (the CPU's root complex)
  kNumaNode,    // NODE  within one NUMA node, across its host bridges
  kPackage,     // PKG   across NUMA nodes of one socket
  kSystem,      // SYS   across sockets (UPI, Infinity Fabric)
  kNetwork,     // NET   across hosts
};

inline constexpr LinkClass kAllLinkClasses[] = {
    LinkClass::kSelf,     LinkClass::kGpuLink, LinkClass::kPciSwitch, LinkClass::kHostBridge,
    LinkClass::kNumaNode, LinkClass::kPackage, LinkClass::kSystem,    LinkClass::kNetwork};

// The short code shown in the matrix ("X", "NV", "PIX", ...).
std::string_view code(LinkClass c);
// One line for the legend.
std::string_view description(LinkClass c);
// Relative time to move a byte over a path of this class (kSelf 0, kGpuLink 1, ... kNetwork 24).
// First estimates from typical bandwidths; the tuner's measured constants will replace them.
double link_cost(LinkClass c);

struct Node {
  NodeKind kind = NodeKind::kMachine;
  int parent = -1;            // node id; -1 for the machine
  std::string name;           // "GPU0", "mlx5_0", "NUMA 1", "Package 0", "switch 0000:02:00.0"
  std::string detail;         // model or other names: "NVIDIA A100-SXM4-80GB", "ib0", a CPU model
  std::string pci_bus_id;     // "0000:07:00.0" for PCI objects, else empty
  std::string cpus;           // PUs (OS indexes) local to the node, list form "0-7,16-23"
  uint64_t memory_bytes = 0;  // NUMA nodes: local memory
  int os_index = -1;          // NUMA node and package OS index; GPU runtime ordinal
};

struct Core {
  int numa = -1;         // node id of its NUMA node (-1 when unknown)
  std::vector<int> pus;  // OS indexes of its hardware threads
};

struct CacheLevel {
  std::string name;    // "L1d", "L1i", "L2", "L3"
  uint64_t bytes = 0;  // one instance
  int count = 0;       // instances in the host
};

// A GPU-to-GPU link outside the PCIe tree.
struct GpuLink {
  int a = -1;  // node ids, a < b
  int b = -1;
  double gbps = 0;  // bandwidth as the driver reports it (GB/s)
};

struct Topology {
  std::string hostname;
  std::string gpu_link_name;  // "NVLink", "xGMI", or empty when there are no GpuLinks
  std::vector<Node> nodes;    // depth first; nodes[0] is the machine
  std::vector<Core> cores;    // in hwloc's logical order (neighbouring cores share caches)
  std::vector<CacheLevel> caches;
  std::vector<GpuLink> gpu_links;

  uint64_t memory_bytes() const;
  int pu_count() const;
  // Node ids of one kind, in depth-first order.
  std::vector<int> nodes_of(NodeKind kind) const;
  std::vector<int> gpus() const { return nodes_of(NodeKind::kGpu); }
  std::vector<int> nics() const { return nodes_of(NodeKind::kNic); }
  std::vector<int> numa_nodes() const { return nodes_of(NodeKind::kNumaNode); }
  std::vector<int> packages() const { return nodes_of(NodeKind::kPackage); }
  // GPUs, then NICs, then NUMA nodes: the rows and columns of the distance matrix.
  std::vector<int> endpoints() const;

  // The nearest ancestor of `node` (itself included) of `kind`, or -1.
  int ancestor(int node, NodeKind kind) const;
  // The NUMA node nearest to `node`: its NUMA ancestor, else the first NUMA node below its
  // closest ancestor that has one; -1 when the host reports no NUMA node.
  int numa_of(int node) const;
  // The class of the path between two nodes of this host.
  LinkClass link(int a, int b) const;
  // The GPU link between two GPUs, or nullptr.
  const GpuLink* gpu_link(int a, int b) const;

  // Checks the invariants (parents precede children, ids in range, one machine root); throws
  // chorus::InvalidArgument naming the first violation. Deserialisation calls it.
  void validate() const;
};

// Reorders `nodes` depth first (children in their current relative order) and renumbers every
// reference to a node. Builders append nodes in any order with parents set, then call this.
void sort_depth_first(Topology& topology);

// "0-3,8,10-11" <-> {0,1,2,3,8,10,11}. parse throws chorus::InvalidArgument when malformed.
std::string format_cpu_list(const std::vector<int>& cpus);
std::vector<int> parse_cpu_list(std::string_view text);

}  // namespace chorus::topo
