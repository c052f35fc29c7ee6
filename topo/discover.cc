// Discovery: hwloc's object tree -> chorus's Topology.
//
// hwloc's tree is large (every cache, every bridge); chorus keeps the parts that decide how
// fast two endpoints can talk. I/O subtrees hang below the NUMA node their host bridge is local
// to (below the package, or the machine, when that is not a single NUMA node), and of the PCIe
// bridges only the branching points stay: a bridge with kept devices behind more than one of its
// ports is a switch; a chain of single-port bridges adds nothing to the distance.
#include "chorus/topo/discover.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>

#include "chorus/error.h"
#include "chorus/log.h"
#include "gpu_runtime.h"
#include "hwloc_handle.h"

namespace chorus::topo {

HwlocHandle::HwlocHandle() {
  if (hwloc_topology_init(&topology_) != 0) throw_system_error("hwloc_topology_init", errno);
  hwloc_topology_set_io_types_filter(topology_, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
}

HwlocHandle::~HwlocHandle() { hwloc_topology_destroy(topology_); }

void HwlocHandle::load(const char* what) {
  CHORUS_ARG_CHECK(hwloc_topology_load(topology_) == 0, "hwloc cannot load ", what);
}

namespace {

constexpr unsigned kVendorNvidia = 0x10de;
constexpr unsigned kVendorAmd = 0x1002;

std::string cpu_list(hwloc_const_cpuset_t set) {
  if (set == nullptr) return {};
  char* text = nullptr;
  if (hwloc_bitmap_list_asprintf(&text, set) < 0) return {};
  std::string out = text;
  std::free(text);
  return out;
}

std::string info(hwloc_obj_t obj, const char* name) {
  const char* value = hwloc_obj_get_info_by_name(obj, name);
  return value ? value : "";
}

std::string bus_id(hwloc_obj_t pci) {
  const auto& a = pci->attr->pcidev;
  char out[32];
  std::snprintf(out, sizeof out, "%04x:%02x:%02x.%x", a.domain, a.bus, a.dev, a.func);
  return out;
}

// OS devices (cuda0, nvml0, eth0, mlx5_0) directly below a PCI device.
std::vector<hwloc_obj_t> os_devices(hwloc_obj_t pci) {
  std::vector<hwloc_obj_t> out;
  for (hwloc_obj_t c = pci->io_first_child; c != nullptr; c = c->next_sibling)
    if (c->type == HWLOC_OBJ_OS_DEVICE) out.push_back(c);
  return out;
}

bool is_gpu(hwloc_obj_t pci) {
  const unsigned cls = pci->attr->pcidev.class_id >> 8;  // base class
  const unsigned vendor = pci->attr->pcidev.vendor_id;
  bool compute = false;
  for (hwloc_obj_t os : os_devices(pci)) compute |= os->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC;
  // 0x03: display controllers; 0x12: processing accelerators. A server's BMC VGA (ASPEED,
  // Matrox) is a display controller of another vendor without a compute device: not a GPU.
  return (cls == 0x03 && (compute || vendor == kVendorNvidia || vendor == kVendorAmd)) ||
         (cls == 0x12 && compute);
}

bool is_nic(hwloc_obj_t pci) {
  if ((pci->attr->pcidev.class_id >> 8) == 0x02) return true;
  for (hwloc_obj_t os : os_devices(pci))
    if (os->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ||
        os->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS)
      return true;
  return false;
}

std::string pci_ids(hwloc_obj_t pci) {
  char out[32];
  std::snprintf(out, sizeof out, "PCI %04x:%04x", pci->attr->pcidev.vendor_id,
                pci->attr->pcidev.device_id);
  return out;
}

std::string gpu_model(hwloc_obj_t pci) {
  for (hwloc_obj_t os : os_devices(pci))
    if (std::string model = info(os, "GPUModel"); !model.empty()) return model;
  return pci_ids(pci);
}

// A NIC is named after its RDMA device when it has one (what NCCL_IB_HCA and UCX_NET_DEVICES
// take), and its other OS device names go into `detail`.
void name_nic(hwloc_obj_t pci, int index, Node& node) {
  std::string rdma, others;
  for (hwloc_obj_t os : os_devices(pci)) {
    if (os->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && rdma.empty()) {
      rdma = os->name;
    } else if (os->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK) {
      others += others.empty() ? "" : " ";
      others += os->name;
    }
  }
  node.name = !rdma.empty()     ? rdma
              : !others.empty() ? others.substr(0, others.find(' '))
                                : "NIC" + std::to_string(index);
  node.detail = rdma.empty() ? pci_ids(pci) : others;
}

class Builder {
 public:
  Builder(hwloc_topology_t t, const RuntimeGpus& runtime) : t_(t), runtime_(runtime) {}

  Topology build() {
    hwloc_obj_t root = hwloc_get_root_obj(t_);
    topo_.hostname = info(root, "HostName");
    topo_.nodes.push_back(Node{NodeKind::kMachine, -1, "Machine", {}, {}, cpu_list(root->cpuset)});
    add_packages();
    add_numa_nodes();
    add_cores();
    add_caches();
    add_io();
    add_gpu_links("NVLinkBandwidth", "NVLink");
    add_gpu_links("XGMIBandwidth", "xGMI");
    sort_depth_first(topo_);
    return std::move(topo_);
  }

 private:
  int add(Node node) {
    topo_.nodes.push_back(std::move(node));
    return static_cast<int>(topo_.nodes.size()) - 1;
  }

  void add_packages() {
    for (hwloc_obj_t p = nullptr; (p = hwloc_get_next_obj_by_type(t_, HWLOC_OBJ_PACKAGE, p));) {
      Node node{NodeKind::kPackage,  0,  "Package " + std::to_string(p->logical_index),
                info(p, "CPUModel"), {}, cpu_list(p->cpuset)};
      node.os_index = static_cast<int>(p->os_index);
      package_[p] = add(std::move(node));
    }
  }

  // The node an object's locality maps to: its NUMA node when it has exactly one, else its
  // package, else the machine.
  int locality(hwloc_obj_t normal) {
    if (normal->nodeset != nullptr && hwloc_bitmap_weight(normal->nodeset) == 1) {
      const auto it = numa_by_os_.find(hwloc_bitmap_first(normal->nodeset));
      if (it != numa_by_os_.end()) return it->second;
    }
    if (hwloc_obj_t p = hwloc_get_ancestor_obj_by_type(t_, HWLOC_OBJ_PACKAGE, normal))
      return package_.at(p);
    if (normal->type == HWLOC_OBJ_PACKAGE) return package_.at(normal);
    return 0;
  }

  void add_numa_nodes() {
    for (hwloc_obj_t n = nullptr; (n = hwloc_get_next_obj_by_type(t_, HWLOC_OBJ_NUMANODE, n));) {
      hwloc_obj_t p = hwloc_get_ancestor_obj_by_type(t_, HWLOC_OBJ_PACKAGE, n);
      Node node{NodeKind::kNumaNode,
                p ? package_.at(p) : 0,
                "NUMA " + std::to_string(n->os_index),
                {},
                {},
                cpu_list(n->cpuset)};
      node.memory_bytes = n->attr->numanode.local_memory;
      node.os_index = static_cast<int>(n->os_index);
      numa_by_os_[static_cast<int>(n->os_index)] = add(std::move(node));
      numa_sets_.emplace_back(n->cpuset, numa_by_os_[static_cast<int>(n->os_index)]);
    }
  }

  void add_cores() {
    hwloc_obj_type_t type =
        hwloc_get_nbobjs_by_type(t_, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    for (hwloc_obj_t c = nullptr; (c = hwloc_get_next_obj_by_type(t_, type, c));) {
      Core core;
      for (const auto& [set, id] : numa_sets_)
        if (hwloc_bitmap_isincluded(c->cpuset, set)) core.numa = id;
      for (hwloc_obj_t pu = nullptr;
           (pu = hwloc_get_next_obj_inside_cpuset_by_type(t_, c->cpuset, HWLOC_OBJ_PU, pu));)
        core.pus.push_back(static_cast<int>(pu->os_index));
      topo_.cores.push_back(std::move(core));
    }
  }

  void add_caches() {
    static constexpr std::pair<hwloc_obj_type_t, const char*> kCaches[] = {
        {HWLOC_OBJ_L1CACHE, "L1d"}, {HWLOC_OBJ_L1ICACHE, "L1i"}, {HWLOC_OBJ_L2CACHE, "L2"},
        {HWLOC_OBJ_L3CACHE, "L3"},  {HWLOC_OBJ_L4CACHE, "L4"},   {HWLOC_OBJ_L5CACHE, "L5"}};
    for (const auto& [type, name] : kCaches) {
      const int count = hwloc_get_nbobjs_by_type(t_, type);
      if (count <= 0) continue;
      hwloc_obj_t first = hwloc_get_obj_by_type(t_, type, 0);
      topo_.caches.push_back(CacheLevel{name, first->attr->cache.size, count});
    }
  }

  // The PCI tree, reduced to host bridges, switches and the kept devices.
  void add_io() {
    struct Kept {
      hwloc_obj_t pci;
      NodeKind kind;
      std::vector<hwloc_obj_t> path;  // bridges from the host bridge down to its parent
    };
    std::vector<Kept> kept;
    for (hwloc_obj_t d = nullptr; (d = hwloc_get_next_pcidev(t_, d));) {
      const NodeKind kind = is_gpu(d)   ? NodeKind::kGpu
                            : is_nic(d) ? NodeKind::kNic
                                        : NodeKind::kMachine;
      if (kind == NodeKind::kMachine || (kind == NodeKind::kGpu && !runtime_shows(d))) continue;
      Kept k{d, kind, {}};
      for (hwloc_obj_t up = d->parent; up != nullptr && up->type == HWLOC_OBJ_BRIDGE;
           up = up->parent)
        k.path.insert(k.path.begin(), up);
      kept.push_back(std::move(k));
    }
    // A bridge branches when kept devices sit behind more than one of its children.
    std::map<hwloc_obj_t, std::set<hwloc_obj_t>> next_hops;
    for (const Kept& k : kept)
      for (size_t i = 0; i < k.path.size(); ++i)
        next_hops[k.path[i]].insert(i + 1 < k.path.size() ? k.path[i + 1] : k.pci);

    std::map<hwloc_obj_t, int> bridge_node;
    int nic_count = 0;
    for (const Kept& k : kept) {
      int parent = locality(hwloc_get_non_io_ancestor_obj(t_, k.pci));
      for (hwloc_obj_t bridge : k.path) {
        const bool host = bridge->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
        if (!host && next_hops[bridge].size() < 2) continue;
        auto [it, fresh] = bridge_node.try_emplace(bridge, -1);
        if (fresh) it->second = add(bridge_as_node(bridge, host, parent));
        parent = it->second;
      }
      Node node{k.kind, parent,        {},
                {},     bus_id(k.pci), cpu_list(hwloc_get_non_io_ancestor_obj(t_, k.pci)->cpuset)};
      if (k.kind == NodeKind::kGpu) {
        node.os_index = gpu_ordinal(node.pci_bus_id);
        node.name = "GPU" + std::to_string(node.os_index);
        node.detail = gpu_model(k.pci);
      } else {
        name_nic(k.pci, nic_count++, node);
      }
      pci_node_[k.pci] = add(std::move(node));
    }
  }

  Node bridge_as_node(hwloc_obj_t bridge, bool host, int parent) const {
    const auto& b = bridge->attr->bridge;
    char range[48];
    std::snprintf(range, sizeof range, "%04x:[%02x-%02x]", b.downstream.pci.domain,
                  b.downstream.pci.secondary_bus, b.downstream.pci.subordinate_bus);
    Node node{host ? NodeKind::kHostBridge : NodeKind::kPciSwitch,        parent, {}, range, {},
              cpu_list(hwloc_get_non_io_ancestor_obj(t_, bridge)->cpuset)};
    if (host) {
      node.name = "HostBridge " + std::string(range);
    } else {
      node.pci_bus_id = bus_id(bridge);
      node.name = "Switch " + node.pci_bus_id;
    }
    return node;
  }

  bool runtime_shows(hwloc_obj_t pci) const {
    if (runtime_.pci_bus_ids.empty()) return true;
    const std::string id = bus_id(pci);
    for (const std::string& r : runtime_.pci_bus_ids)
      if (r == id) return true;
    return false;
  }

  // The runtime's ordinal; without a runtime, the GPU's position in PCI order (CUDA's order
  // under CUDA_DEVICE_ORDER=PCI_BUS_ID, HIP's default).
  int gpu_ordinal(const std::string& id) {
    for (size_t i = 0; i < runtime_.pci_bus_ids.size(); ++i)
      if (runtime_.pci_bus_ids[i] == id) return static_cast<int>(i);
    return next_gpu_++;
  }

  void add_gpu_links(const char* matrix, const char* link_name) {
    unsigned count = 1;
    hwloc_distances_s* dist = nullptr;
    if (hwloc_distances_get_by_name(t_, matrix, &count, &dist, 0) != 0 || count == 0) return;
    const unsigned n = dist->nbobjs;
    for (unsigned i = 0; i < n; ++i)
      for (unsigned j = i + 1; j < n; ++j) {
        const hwloc_uint64_t value = std::max(dist->values[i * n + j], dist->values[j * n + i]);
        const int a = gpu_node_of(dist->objs[i]);
        const int b = gpu_node_of(dist->objs[j]);
        if (value == 0 || a < 0 || b < 0 || a == b) continue;
        // NVML and RSMI report MB/s.
        topo_.gpu_links.push_back(GpuLink{std::min(a, b), std::max(a, b), value / 1000.0});
        topo_.gpu_link_name = link_name;
      }
    hwloc_distances_release(t_, dist);
  }

  int gpu_node_of(hwloc_obj_t obj) const {
    for (; obj != nullptr; obj = obj->parent) {
      auto it = pci_node_.find(obj);
      if (it != pci_node_.end())
        return topo_.nodes[static_cast<size_t>(it->second)].kind == NodeKind::kGpu ? it->second
                                                                                   : -1;
    }
    return -1;
  }

  hwloc_topology_t t_;
  const RuntimeGpus& runtime_;
  Topology topo_;
  std::map<hwloc_obj_t, int> package_;
  std::map<int, int> numa_by_os_;
  std::vector<std::pair<hwloc_const_cpuset_t, int>> numa_sets_;
  std::map<hwloc_obj_t, int> pci_node_;
  int next_gpu_ = 0;
};

std::string local_hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

}  // namespace

Topology discover() {
  HwlocHandle h;
  h.load("this host's topology");
  // A topology loaded through HWLOC_XMLFILE/HWLOC_SYNTHETIC is not this system: its GPUs are
  // not the runtime's.
  const bool this_system = hwloc_topology_is_thissystem(h.get());
  const RuntimeGpus runtime = this_system ? query_runtime_gpus() : RuntimeGpus{};
  Topology t = Builder(h.get(), runtime).build();
  if (t.hostname.empty()) t.hostname = local_hostname();
  CHORUS_INFO(kLogInit, "topology: ", t.hostname, ", ", t.packages().size(), " packages, ",
              t.numa_nodes().size(), " NUMA nodes, ", t.cores.size(), " cores, ", t.gpus().size(),
              " GPUs", runtime.runtime.empty() ? "" : " (" + runtime.runtime + ")", ", ",
              t.nics().size(), " NICs");
  return t;
}

Topology load_xml(const std::string& path) { return load_xml_with_runtime(path, {}); }

Topology load_xml_with_runtime(const std::string& path, const RuntimeGpus& runtime) {
  CHORUS_ARG_CHECK(std::filesystem::is_regular_file(path), "topology XML '", path,
                   "' is not a readable file");
  HwlocHandle h;
  CHORUS_ARG_CHECK(hwloc_topology_set_xml(h.get(), path.c_str()) == 0,
                   "hwloc cannot read topology XML '", path, "'");
  h.load(("topology XML '" + path + "'").c_str());
  Topology t = Builder(h.get(), runtime).build();
  if (t.hostname.empty()) t.hostname = std::filesystem::path(path).stem().string();
  return t;
}

Topology load_synthetic(const std::string& description) {
  HwlocHandle h;
  CHORUS_ARG_CHECK(hwloc_topology_set_synthetic(h.get(), description.c_str()) == 0,
                   "malformed synthetic topology '", description, "'");
  h.load(("synthetic topology '" + description + "'").c_str());
  Topology t = Builder(h.get(), RuntimeGpus{}).build();
  if (t.hostname.empty()) t.hostname = "synthetic";
  return t;
}

}  // namespace chorus::topo
