// A mesh as a topology grid: its axes' traffic (mesh_placement.h), then topo::place.
#include "chorus/parallel/mesh_placement.h"

#include <string>

#include "chorus/error.h"

namespace chorus::parallel {
namespace {

using Pattern = topo::GridAxis::Pattern;

topo::GridAxis grid_axis(const MeshShape& shape, Axis axis) {
  const std::string name(to_string(axis));
  switch (axis) {
    case Axis::kTp:
      return {name, shape.tp, 8, Pattern::kRing};
    case Axis::kPp:
      return {name, shape.pp, 2, Pattern::kChain};
    case Axis::kDp:
      return {name, shape.dp, 1, Pattern::kRing};
  }
  return {};
}

}  // namespace

topo::Grid mesh_grid(const MeshShape& shape) {
  topo::Grid grid;
  for (Axis axis : shape.order) grid.axes.push_back(grid_axis(shape, axis));
  return grid;
}

topo::Placement place_mesh(const MeshShape& shape, std::span<const topo::Topology> hosts) {
  // The two ways a mesh most often fails to fit, in the mesh's words; topo::place checks them
  // again in the grid's, and the rest (no hosts, too few GPUs).
  if (!hosts.empty()) {
    const int nhosts = static_cast<int>(hosts.size());
    CHORUS_ARG_CHECK(shape.world_size() % nhosts == 0, "mesh dp=", shape.dp, ",tp=", shape.tp,
                     ",pp=", shape.pp, " has ", shape.world_size(),
                     " ranks, not a multiple of the ", nhosts, " hosts");
    const int per_host = shape.world_size() / nhosts;
    CHORUS_ARG_CHECK(shape.tp <= per_host, "tp=", shape.tp, " is larger than a host: ", nhosts,
                     " hosts x ", per_host, " ranks (tensor-parallel groups must not span hosts)");
  }
  return topo::place(mesh_grid(shape), hosts);
}

}  // namespace chorus::parallel
