// chorus::parallel — the device mesh: one world of ranks seen as dp x tp x pp, and a
// communicator for every axis.
//
// Axes. tp (tensor parallel: the ranks that split every layer), dp (data parallel: replicas that
// see different data), pp (pipeline parallel: the stages a model is cut into). Every rank has a
// coordinate (dp, tp, pp); the mesh rank of a coordinate follows the shape's axis order, fastest
// varying first. The default, tp-dp-pp, is Megatron-LM's:
//   mesh rank = tp_index + tp * (dp_index + dp * pp_index)
// so a tensor-parallel group is a run of consecutive ranks, the replicas of one stage come next,
// and stages are the slowest axis.
//
// Groups. dp() holds the ranks that differ only in their dp index (one per (tp, pp) pair: the
// ranks that reduce the same gradients), tp() those that differ only in tp, pp() only in pp, and
// mp() the model-parallel group: every rank of one replica (tp x pp; a global gradient norm sums
// over it). Each is a Communicator made by split() of the world, ordered by the axis index, so
// dp().rank() is this rank's dp index. Groups are named for their errors: "dp group g" with g =
// tp + tp * pp (the coordinates off the axis, fastest first), "tp group" dp + dp * pp, "pp
// group" tp + tp * dp, "mp group" dp; an error names a rank as "rank 1 of tp group 0 (world
// rank 3)".
//
// Placement. Mesh ranks are not always world ranks: when the ranks' hosts can be discovered
// (hwloc; HWLOC_XMLFILE stands in a saved topology), the topology placement (place_mesh) decides
// which world rank takes which mesh rank, so that tensor-parallel groups stay inside the fastest
// domain (one GPU switch or island, one socket) and data parallelism spans hosts. Where the
// placement scores no better than rank order (every slot alike, as on one CPU socket), mesh rank
// = world rank. MeshOptions::placement = kRankOrder keeps rank order always.
//
// Kernels. Making a mesh agrees the compute kernels over the world before anything computes on
// it: every rank takes rank 0's GEMM backend and bf16 plan, which a deterministic world pins by
// rule instead of timing (tensor::pin_gemm_choices), so a pipeline's layer measurement or a
// tensor-parallel layer never runs on a kernel chosen by a clock.
//
// A mesh is passed explicitly to whatever needs a group (never a global), and lives as long as
// its groups are used. Making one is collective over the world communicator.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/parallel/mesh_shape.h"

namespace chorus::parallel {

struct MeshOptions {
  enum class Placement : uint8_t {
    kTopology,   // mesh ranks placed by the hosts' topologies where that beats rank order
    kRankOrder,  // mesh rank = world rank
  };
  Placement placement = Placement::kTopology;
};

class DeviceMesh {
 public:
  // Splits `world` into the groups of `shape`. Collective over `world`, which must outlive the
  // mesh. Throws InvalidArgument naming the sizes when world.size() is not dp * tp * pp.
  DeviceMesh(Communicator& world, MeshShape shape, MeshOptions options = {});
  ~DeviceMesh();
  DeviceMesh(const DeviceMesh&) = delete;
  DeviceMesh& operator=(const DeviceMesh&) = delete;
  DeviceMesh(DeviceMesh&&) noexcept;
  DeviceMesh& operator=(DeviceMesh&&) noexcept;

  const MeshShape& shape() const;
  // This rank's place in the mesh.
  int mesh_rank() const;
  MeshCoord coord() const;
  // The mesh rank of every world rank (indexed by world rank), and the reverse.
  const std::vector<int>& mesh_rank_of_world() const;
  int world_rank_of(const MeshCoord& coord) const;
  // "tp,pp,dp" when placed by topology, "rank order" otherwise.
  const std::string& layout() const;

  Communicator& world();
  Communicator& dp();
  Communicator& tp();
  Communicator& pp();
  Communicator& mp();  // tp x pp: one replica of the model
  Communicator& group(Axis axis);

  // "mesh dp=2 tp=1 pp=1 (tp-dp-pp, rank order): rank 1 = dp 1, tp 0, pp 0".
  std::string describe() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus::parallel
