// chorus-topo — the views: text for people, JSON for scripts, Graphviz for pictures.
#pragma once

#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "chorus/parallel/mesh_shape.h"
#include "chorus/topo/placement.h"
#include "chorus/topo/topology.h"

namespace chorus::topo::cli {

// A mesh and where its ranks run (parallel::place_mesh).
struct PlacedMesh {
  parallel::MeshShape shape;
  Placement placement;
};

// Sockets, NUMA nodes, cores, memory, caches, then the tree of I/O paths and devices.
void print_summary(std::ostream& os, const Topology& host);

// The link class between every pair of endpoints, CPU and NUMA affinity, and the legend.
void print_matrix(std::ostream& os, const Topology& host);

// The rank table and the ring order of the whole job.
void print_placement(std::ostream& os, const PlacedMesh& placed, std::span<const Topology> hosts);

// One JSON document: the host, its endpoints and matrix, and the placement when there is one.
void print_json(std::ostream& os, const Topology& host, const PlacedMesh* placed,
                std::span<const Topology> hosts);

// A Graphviz digraph of the host: packages and NUMA nodes as clusters, the PCIe tree inside.
std::string to_dot(const Topology& host);

// Pipes `dot` into Graphviz's dot to write `path` in `format` ("svg", "png"). Throws
// chorus::Error when dot is not installed or fails.
void render_image(const std::string& dot, const std::string& format, const std::string& path);

// Ring order of the job's ranks over their placed endpoints (ring_order.h).
std::vector<int> job_ring(const Placement& placement, std::span<const Topology> hosts);

// "512 GiB", "48 KiB".
std::string format_bytes(uint64_t bytes);

// Matrix label of an endpoint: its name without spaces ("NUMA 0" -> "NUMA0").
std::string label(const Node& node);

}  // namespace chorus::topo::cli
