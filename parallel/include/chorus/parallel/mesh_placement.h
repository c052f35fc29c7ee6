// chorus::parallel — where each rank of a dp x tp x pp mesh runs, by the topology placement.
//
// topo::place lays out a grid of named axes by the traffic it is told (topo/placement.h); this
// file says what the mesh's axes carry. Their traffic differs by orders of magnitude: TP runs
// several all-reduces per layer, PP sends activations between neighbouring stages, DP one
// gradient all-reduce per step. So the grid gets, in relative bytes per step,
//   tp: 8, ring    pp: 2, chain    dp: 1, ring
// and placement puts TP groups on consecutive slots (the fastest domain: one switch, one socket,
// one host), then tries PP before DP (layout "tp,pp,dp"), then DP before PP ("tp,dp,pp"), and
// keeps the cheapest, never worse than the naive layout.
#pragma once

#include <span>

#include "chorus/parallel/mesh_shape.h"
#include "chorus/topo/grid.h"
#include "chorus/topo/placement.h"
#include "chorus/topo/topology.h"

namespace chorus::parallel {

// The grid of `shape`: its axes in the shape's order (fastest first, so grid rank = mesh rank),
// named "tp", "dp", "pp", with the weights and patterns above.
topo::Grid mesh_grid(const MeshShape& shape);

// topo::place(mesh_grid(shape), hosts): Placement::ranks is indexed by mesh rank, each rank's
// coordinate is in the shape's axis order (shape.coord_of(rank) says the same). Throws
// InvalidArgument when the mesh does not fit the hosts (topo::place says when).
topo::Placement place_mesh(const MeshShape& shape, std::span<const topo::Topology> hosts);

}  // namespace chorus::parallel
