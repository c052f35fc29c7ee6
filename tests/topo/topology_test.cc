#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "chorus/error.h"
#include "chorus/gpu/runtime.h"
#include "chorus/topo/discover.h"
#include "chorus/topo/serialize.h"
#include "fixtures.h"
#include "gpu_runtime.h"

namespace chorus::topo {
namespace {

using namespace testing;

size_t count_kind(const Topology& t, NodeKind kind) { return t.nodes_of(kind).size(); }

// How a process on the DGX-like host sees it through a GPU runtime: CUDA_VISIBLE_DEVICES=6,1,3
// shows three GPUs as ordinals 0, 1, 2; the others are left out. The runtime's bus ids come in
// its own spelling (8-digit domain, upper case) and still match.
TEST(RuntimeGpus, GpusMatchTheRuntimeOrdinalsByBusId) {
  const Topology& all = fixture(kDgx);
  auto bus_of = [&](int g) {
    return all.nodes[static_cast<size_t>(node_named(all, "GPU" + std::to_string(g)))].pci_bus_id;
  };
  RuntimeGpus runtime{"CUDA", {}};
  for (int g : {6, 1, 3}) {
    std::string id = bus_of(g);
    std::transform(id.begin(), id.end(), id.begin(), ::toupper);
    runtime.pci_bus_ids.push_back(normalize_bus_id("0000" + id));
  }
  const Topology seen = load_xml_with_runtime(fixture_path(kDgx), runtime);
  ASSERT_EQ(seen.gpus().size(), 3u);
  const int shown[] = {6, 1, 3};
  for (int ordinal = 0; ordinal < 3; ++ordinal) {
    const Node& gpu =
        seen.nodes[static_cast<size_t>(node_named(seen, "GPU" + std::to_string(ordinal)))];
    EXPECT_EQ(gpu.os_index, ordinal);
    EXPECT_EQ(gpu.pci_bus_id, bus_of(shown[ordinal])) << "runtime ordinal " << ordinal;
  }
  EXPECT_EQ(seen.nics().size(), 8u) << "NICs do not depend on the GPU runtime";
  // Without a runtime every GPU is shown, numbered in PCI order.
  EXPECT_EQ(load_xml_with_runtime(fixture_path(kDgx), {}).gpus().size(), 8u);
}

TEST(RuntimeGpus, BusIdsAreNormalised) {
  EXPECT_EQ(normalize_bus_id("00000000:07:00.0"), "0000:07:00.0");
  EXPECT_EQ(normalize_bus_id("0000:3B:00.1"), "0000:3b:00.1");
  EXPECT_EQ(normalize_bus_id("0000:07:00"), "0000:07:00.0");
  EXPECT_EQ(normalize_bus_id("not-a-bus-id"), "not-a-bus-id");
}

// The bus ids come from chorus's GPU runtime layer: one per device it shows, none (and no error)
// where it shows none: a build without GPU support, a machine without a driver or a device.
TEST(RuntimeGpus, OnePerRuntimeDeviceAndNoneWithoutOne) {
  const gpu::Devices devices = gpu::probe_devices();
  const RuntimeGpus runtime = query_runtime_gpus();
  ASSERT_EQ(runtime.pci_bus_ids.size(), static_cast<size_t>(devices.count)) << devices.reason;
  EXPECT_EQ(runtime.runtime.empty(), devices.count == 0) << runtime.runtime;
  for (const std::string& id : runtime.pci_bus_ids) EXPECT_EQ(normalize_bus_id(id), id);
}

TEST(Fixtures, DgxLikeHost) {
  const Topology& t = fixture(kDgx);
  EXPECT_EQ(t.hostname, "dgx-like");
  EXPECT_EQ(t.packages().size(), 2u);
  EXPECT_EQ(t.numa_nodes().size(), 2u);
  EXPECT_EQ(t.cores.size(), 16u);
  EXPECT_EQ(t.pu_count(), 32);
  EXPECT_EQ(t.memory_bytes(), 1024ull << 30);
  EXPECT_EQ(t.gpus().size(), 8u) << "the BMC's VGA is not a GPU";
  EXPECT_EQ(t.nics().size(), 8u);
  EXPECT_EQ(count_kind(t, NodeKind::kPciSwitch), 4u)
      << "bridge chains collapse to their branch points";
  EXPECT_EQ(count_kind(t, NodeKind::kHostBridge), 4u)
      << "the host bridge with no kept device is dropped";
  EXPECT_EQ(t.gpu_links.size(), 28u);
  EXPECT_EQ(t.gpu_link_name, "NVLink");
  for (int g = 0; g < 8; ++g) {
    const Node& gpu = t.nodes[static_cast<size_t>(node_named(t, "GPU" + std::to_string(g)))];
    EXPECT_EQ(gpu.os_index, g);
    EXPECT_EQ(gpu.detail, "NVIDIA A100-SXM4-80GB");
    EXPECT_EQ(gpu.cpus, g < 4 ? "0-15" : "16-31");
  }
  const Node& nic = t.nodes[static_cast<size_t>(node_named(t, "mlx5_0"))];
  EXPECT_EQ(nic.detail, "ib0");
  EXPECT_EQ(nic.pci_bus_id, "0000:05:00.0");
}

TEST(Fixtures, DgxLikeLinkClasses) {
  const Topology& t = fixture(kDgx);
  auto link = [&](const char* a, const char* b) {
    return t.link(node_named(t, a), node_named(t, b));
  };
  EXPECT_EQ(link("GPU0", "GPU0"), LinkClass::kSelf);
  EXPECT_EQ(link("GPU0", "GPU7"), LinkClass::kGpuLink);
  EXPECT_EQ(link("GPU0", "mlx5_0"), LinkClass::kPciSwitch);
  EXPECT_EQ(link("GPU0", "mlx5_2"), LinkClass::kNumaNode);
  EXPECT_EQ(link("GPU0", "mlx5_4"), LinkClass::kSystem);
  EXPECT_EQ(link("mlx5_0", "mlx5_1"), LinkClass::kPciSwitch);
  EXPECT_EQ(link("GPU0", "NUMA 0"), LinkClass::kNumaNode);
  EXPECT_EQ(link("NUMA 0", "NUMA 1"), LinkClass::kSystem);
  // The matrix is symmetric.
  for (int a : t.endpoints())
    for (int b : t.endpoints()) EXPECT_EQ(t.link(a, b), t.link(b, a));
}

TEST(Fixtures, WorkstationSwitchAndRootPorts) {
  const Topology& t = fixture(kWorkstation);
  ASSERT_EQ(t.gpus().size(), 4u);
  EXPECT_EQ(t.nics().size(), 1u);
  EXPECT_TRUE(t.gpu_links.empty());
  auto link = [&](const char* a, const char* b) {
    return t.link(node_named(t, a), node_named(t, b));
  };
  EXPECT_EQ(link("GPU0", "GPU1"), LinkClass::kPciSwitch);
  EXPECT_EQ(link("GPU0", "GPU2"), LinkClass::kHostBridge);
  EXPECT_EQ(link("GPU2", "GPU3"), LinkClass::kHostBridge);
  EXPECT_EQ(link("GPU3", "enp97s0"), LinkClass::kHostBridge);
}

TEST(Fixtures, CpuOnlyHosts) {
  const Topology& one = fixture(kCpu1);
  EXPECT_EQ(one.packages().size(), 1u);
  EXPECT_EQ(one.cores.size(), 8u);
  EXPECT_EQ(one.pu_count(), 16);
  EXPECT_TRUE(one.gpus().empty());
  EXPECT_EQ(one.nics().size(), 1u);
  ASSERT_FALSE(one.caches.empty());
  EXPECT_EQ(one.caches.back().name, "L3");

  const Topology& two = fixture(kCpu2);
  EXPECT_EQ(two.packages().size(), 2u);
  ASSERT_EQ(two.numa_nodes().size(), 4u);
  const std::vector<int> numa = two.numa_nodes();
  EXPECT_EQ(two.link(numa[0], numa[1]), LinkClass::kPackage);
  EXPECT_EQ(two.link(numa[0], numa[2]), LinkClass::kSystem);
  for (const Core& c : two.cores) EXPECT_GE(c.numa, 0);
  // The NIC hangs below its socket (its host bridge is local to two NUMA nodes).
  const int eno1 = node_named(two, "eno1");
  EXPECT_EQ(two.link(eno1, numa[0]), LinkClass::kPackage);
  EXPECT_EQ(two.numa_of(eno1), numa[0]);
}

TEST(Topology, LinkClassesAreOrderedByCost) {
  for (size_t i = 0; i + 1 < std::size(kAllLinkClasses); ++i)
    EXPECT_LT(link_cost(kAllLinkClasses[i]), link_cost(kAllLinkClasses[i + 1]))
        << code(kAllLinkClasses[i]);
}

TEST(Topology, DiscoversThisHost) {
  const Topology t = discover();
  EXPECT_FALSE(t.hostname.empty());
  EXPECT_GE(t.cores.size(), 1u);
  EXPECT_GE(t.pu_count(), 1);
  EXPECT_NO_THROW(t.validate());
  for (int a : t.endpoints())
    for (int b : t.endpoints()) EXPECT_NO_THROW(t.link(a, b));
}

TEST(Topology, HonoursHwlocXmlFile) {
  ::setenv("HWLOC_XMLFILE", fixture_path(kCpu2).c_str(), 1);
  const Topology t = discover();
  ::unsetenv("HWLOC_XMLFILE");
  EXPECT_EQ(t.hostname, "cpu-2s");
  EXPECT_EQ(t.numa_nodes().size(), 4u);
}

TEST(Topology, LoadsSynthetic) {
  const Topology t = load_synthetic("pack:2 [numa] l3:2 core:4 pu:2");
  EXPECT_EQ(t.packages().size(), 2u);
  EXPECT_EQ(t.cores.size(), 16u);
  EXPECT_EQ(t.pu_count(), 32);
  EXPECT_TRUE(t.gpus().empty());
}

TEST(Topology, BadSourcesThrowInvalidArgument) {
  EXPECT_THROW(load_synthetic("pack:two"), InvalidArgument);
  EXPECT_THROW(load_xml("/nonexistent/topology.xml"), InvalidArgument);
  EXPECT_THROW(load_xml(fixture_path("make_fixtures.py")), InvalidArgument);
}

TEST(Topology, CpuListsRoundTrip) {
  EXPECT_EQ(format_cpu_list({3, 0, 1, 2, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list(""), std::vector<int>{});
  EXPECT_EQ(format_cpu_list({}), "");
  for (const char* bad : {"a", "3-1", "1,,2", "-1", "1-"})
    EXPECT_THROW(parse_cpu_list(bad), InvalidArgument) << bad;
}

TEST(Topology, SortDepthFirstRenumbersReferences) {
  Topology t = fixture(kDgx);
  // Reverse the node list (parents now follow children), then restore depth-first order.
  const size_t n = t.nodes.size();
  auto flip = [n](int id) { return id < 0 ? id : static_cast<int>(n) - 1 - id; };
  std::reverse(t.nodes.begin(), t.nodes.end());
  for (Node& node : t.nodes) node.parent = flip(node.parent);
  for (Core& c : t.cores) c.numa = flip(c.numa);
  for (GpuLink& l : t.gpu_links) std::tie(l.a, l.b) = std::pair(flip(l.b), flip(l.a));
  EXPECT_THROW(t.validate(), InvalidArgument);
  sort_depth_first(t);
  EXPECT_NO_THROW(t.validate());
  const Topology& original = fixture(kDgx);
  for (int a : original.endpoints())
    for (int b : original.endpoints()) {
      const int x = node_named(t, original.nodes[static_cast<size_t>(a)].name);
      const int y = node_named(t, original.nodes[static_cast<size_t>(b)].name);
      EXPECT_EQ(t.link(x, y), original.link(a, b));
    }
}

TEST(Serialize, RoundTripsEveryFixture) {
  for (const std::string& name : kAllFixtures) {
    const std::string bytes = serialize(fixture(name));
    const Topology back = deserialize(bytes);
    EXPECT_EQ(serialize(back), bytes) << name;
    EXPECT_EQ(back.hostname, fixture(name).hostname);
    EXPECT_LT(bytes.size(), 8192u) << name << " should stay compact";
  }
}

TEST(Serialize, RejectsTruncatedAndForeignBytes) {
  const std::string bytes = serialize(fixture(kWorkstation));
  for (size_t n = 0; n < bytes.size(); n += 7)
    EXPECT_THROW(deserialize(std::string_view(bytes).substr(0, n)), InvalidArgument) << n;
  EXPECT_THROW(deserialize(bytes + "x"), InvalidArgument);
  std::string other_version = bytes;
  other_version[4] = 9;
  EXPECT_THROW(deserialize(other_version), InvalidArgument);
  EXPECT_THROW(deserialize("not a topology at all"), InvalidArgument);
}

}  // namespace
}  // namespace chorus::topo
