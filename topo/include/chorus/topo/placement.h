// chorus — where each rank of a grid of ranks runs: rank -> (host, device, cores).
//
// The grid (grid.h) names its axes, numbers the ranks over them and says how much each axis's
// groups communicate and how (ring or chain). What the axes mean is the caller's: parallel/
// makes the dp x tp x pp mesh into a grid (chorus/parallel/mesh_placement.h).
//
// Slots. Each host offers as many slots as the job has ranks per host: one per GPU when it has
// enough GPUs, else shares of its cores. Slots are listed in topology order (depth first through
// sockets, NUMA nodes, host bridges and switches), so consecutive slots are close.
//
// Placement maps grid ranks to slots. Axes carry traffic that differs by orders of magnitude
// (for a training mesh: tensor parallelism several all-reduces per layer, pipelines activations
// between neighbouring stages, data parallelism one gradient all-reduce per step), so the layout
// nests them: the heaviest axis's groups take consecutive slots (the fastest domain: one switch,
// one socket, one host), the next axis in the nesting comes next, and the outermost spans what is
// left, which is usually the hosts. The candidates are the heaviest axis innermost (the first
// listed on equal weights) followed by every order of the other axes: first by decreasing weight,
// then the other permutations in turn. The cost model scores them and the cheapest wins, the
// earlier candidate on a tie; the naive layout (grid rank r on the r-th slot in device-index
// order, what a launcher gives without topology) is always a candidate, so the choice never
// scores worse.
//
// Cost model. A ring collective runs at the speed of its slowest link, so a ring axis's group
// of n costs
//   weight * 2 (n - 1) / n * max over ring edges of link_cost(edge)
// and a chain costs weight * sum over neighbours of link_cost. The placement's cost is the sum
// over every group of every axis.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "chorus/topo/grid.h"
#include "chorus/topo/topology.h"

namespace chorus::topo {

// Where one rank runs.
struct Slot {
  int host = -1;         // index into the hosts
  int local = -1;        // the slot's position on its host: the local rank that takes it
  int node = -1;         // its endpoint: the GPU's node, or the NUMA node of its cores
  int gpu = -1;          // the GPU's runtime ordinal; -1 for a CPU slot
  int nic = -1;          // node id of the nearest NIC, -1 when the host has none
  std::vector<int> pus;  // the PUs (OS indexes) it should be bound to
};

// `count` slots of one host, in topology order. GPU slots when the host has at least `count`
// GPUs, each with a fair share of the cores local to its GPU; otherwise CPU slots, each a
// contiguous run of cores (shared round-robin when count exceeds the cores).
std::vector<Slot> host_slots(const Topology& host, int host_index, int count);

struct RankPlacement {
  int rank = 0;
  std::vector<int> coord;  // grid.coord_of(rank): one entry per grid axis
  Slot slot;
};

struct Placement {
  Grid grid;
  std::vector<RankPlacement> ranks;  // indexed by grid rank
  std::string layout;  // the nesting chosen, axis names innermost first ("tp,pp,dp"), or "naive"
  double cost = 0;
  double naive_cost = 0;  // the naive layout's cost, for comparison
};

// Places `grid` on `hosts` (one topology per host, each running world_size / hosts.size()
// ranks). Throws chorus::InvalidArgument when the grid does not fit: no axes or an axis of size
// below 1, world size not a multiple of the host count, the heaviest axis larger than the ranks
// of a host (its groups must not span hosts), a GPU host with fewer GPUs than ranks.
Placement place(const Grid& grid, std::span<const Topology> hosts);

// Grid rank r on the r-th slot in device-index order: what a topology-unaware launcher gives.
Placement naive_placement(const Grid& grid, std::span<const Topology> hosts);

// The cost model's score of `slot_of_rank` (indexed by grid rank).
double placement_cost(const Grid& grid, std::span<const Topology> hosts,
                      std::span<const Slot> slot_of_rank);

}  // namespace chorus::topo
