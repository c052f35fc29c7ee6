// chorus — where each rank of a dp x tp x pp mesh runs: rank -> (host, device, cores).
//
// Mesh ranks. A mesh numbers its ranks by an axis order, fastest-varying axis first. The
// default, "tp-dp-pp", is Megatron-LM's: the ranks of one tensor-parallel group are consecutive,
// then data-parallel replicas, and pipeline stages are the slowest axis:
//   rank = tp_index + tp * (dp_index + dp * pp_index)
//
// Slots. Each host offers as many slots as the job has ranks per host: one per GPU when it has
// enough GPUs, else shares of its cores. Slots are listed in topology order (depth first through
// sockets, NUMA nodes, host bridges and switches), so consecutive slots are close.
//
// Placement maps mesh ranks to slots. The traffic of the axes differs by orders of magnitude
// (TP: several all-reduces per layer; PP: activations between neighbouring stages; DP: one
// gradient all-reduce per step), so the layout nests them: TP groups take consecutive slots
// (the fastest domain: one switch, one socket, one host), PP neighbours come next, and DP spans
// what is left, which is usually the hosts. Candidate nestings are scored by a cost model and
// the cheapest wins; the naive layout (mesh rank r on the r-th slot in device-index order, what
// a launcher gives without topology) is always a candidate, so the choice never scores worse.
//
// Cost model. A ring collective runs at the speed of its slowest link, so a TP or DP group costs
//   weight * 2 (n - 1) / n * max over ring edges of link_cost(edge)
// and a pipeline costs weight * sum over neighbouring stages of link_cost. Weights are relative
// bytes per step (CostModel).
#pragma once

#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/topo/topology.h"

namespace chorus::topo {

enum class Axis : uint8_t { kTp, kDp, kPp };
std::string_view to_string(Axis axis);

struct MeshCoord {
  int dp = 0;
  int tp = 0;
  int pp = 0;
  int operator[](Axis axis) const;
  int& operator[](Axis axis);
};

struct Mesh {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  std::array<Axis, 3> order = {Axis::kTp, Axis::kDp, Axis::kPp};  // fastest-varying first

  int world_size() const { return dp * tp * pp; }
  int size(Axis axis) const;
  MeshCoord coord_of(int rank) const;
  int rank_of(const MeshCoord& coord) const;
  std::string order_string() const;  // "tp-dp-pp"
};

// Parses "dp=2,tp=4,pp=2" with an optional ",order=tp-pp-dp"; axes left out are 1. Throws
// chorus::InvalidArgument naming the bad part.
Mesh parse_mesh(std::string_view text);

struct CostModel {
  double tp_weight = 8;
  double pp_weight = 2;
  double dp_weight = 1;
};

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
  MeshCoord coord;
  Slot slot;
};

struct Placement {
  Mesh mesh;
  std::vector<RankPlacement> ranks;  // indexed by mesh rank
  std::string layout;                // the nesting chosen, innermost first ("tp,pp,dp"), or "naive"
  double cost = 0;
  double naive_cost = 0;  // the naive layout's cost, for comparison
};

// Places `mesh` on `hosts` (one topology per host, each running world_size / hosts.size()
// ranks). Throws chorus::InvalidArgument when the mesh does not fit: world size not a multiple
// of the host count, tp larger than the ranks of a host, a GPU host with fewer GPUs than ranks.
Placement place(const Mesh& mesh, std::span<const Topology> hosts, const CostModel& model = {});

// Mesh rank r on the r-th slot in device-index order: what a topology-unaware launcher gives.
Placement naive_placement(const Mesh& mesh, std::span<const Topology> hosts,
                          const CostModel& model = {});

// The cost model's score of `slot_of_rank` (indexed by mesh rank).
double placement_cost(const Mesh& mesh, std::span<const Topology> hosts,
                      std::span<const Slot> slot_of_rank, const CostModel& model = {});

}  // namespace chorus::topo
