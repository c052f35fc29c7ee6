// chorus — building a Topology with hwloc: from this host, or from a saved or synthetic one.
//
// I/O discovery keeps what hwloc calls the important devices (GPUs, NICs, storage; bridges on
// their paths). GPUs are PCI display or accelerator devices of a GPU vendor or with a compute OS
// device (cuda0, rsmi0, ...); when a CUDA or HIP runtime is installed, discover() numbers them by
// the runtime's device ordinals (matched by PCI bus id) and drops those the runtime does not
// show (CUDA_VISIBLE_DEVICES). NICs are PCI network devices, named after their RDMA device
// (mlx5_0) when they have one, else their interface (eth0).
//
// GPU links come from the distance matrices hwloc's NVML and RSMI backends record
// ("NVLinkBandwidth", "XGMIBandwidth").
#pragma once

#include <string>

#include "chorus/topo/topology.h"

namespace chorus::topo {

// This host. hwloc itself honours HWLOC_XMLFILE and HWLOC_SYNTHETIC, so a saved topology can
// stand in for the real one without code changes.
Topology discover();

// A topology saved with `lstopo --of xml` (or hwloc_topology_export_xml). Throws
// chorus::InvalidArgument naming the file when it cannot be read or parsed.
Topology load_xml(const std::string& path);

// A synthetic description such as "pack:2 [numa] l3:2 core:8 pu:2" (see hwloc's documentation:
// "Synthetic topologies"). Synthetic topologies have no I/O devices.
Topology load_synthetic(const std::string& description);

}  // namespace chorus::topo
