// The device mesh: which world rank takes which mesh rank, then one split per axis.
#include "chorus/parallel/mesh.h"

#include <algorithm>
#include <sstream>

#include "chorus/error.h"
#include "chorus/log.h"
#include "chorus/parallel/mesh_placement.h"
#include "chorus/topo/discover.h"
#include "chorus/topology_exchange.h"
#include "common/kernel_agreement.h"

namespace chorus::parallel {

struct DeviceMesh::Impl {
  Communicator* world = nullptr;
  MeshShape shape;
  std::vector<int> mesh_of_world;  // mesh rank of each world rank
  std::vector<int> world_of_mesh;  // the reverse
  std::string layout = "rank order";
  std::optional<Communicator> dp, tp, pp, mp;
};

namespace {

// Mesh rank of every world rank by the topology placement, or nullopt when rank order is as
// good (or the hosts cannot be told apart).
std::optional<std::vector<int>> placed_order(Communicator& world, const MeshShape& shape,
                                             std::string* layout) {
  // Every rank discovers its own host; a rank whose discovery fails sends an empty topology, and
  // then all ranks agree to keep rank order (a collective must not fail on some ranks only).
  topo::Topology local;
  bool ok = true;
  try {
    local = topo::discover();
  } catch (const Error& e) {
    CHORUS_INFO(kLogPar, "mesh: topology discovery failed (", e.what(), "); rank order");
    ok = false;
  }
  int32_t mine = ok ? 1 : 0, all_ok = 0;
  world.all_reduce(&mine, &all_ok, 1, DataType::kI32, ReduceOp::kMin);
  if (all_ok == 0) return std::nullopt;
  const std::vector<topo::Topology> per_rank = all_gather_topologies(world, local);
  const topo::JobHosts job = topo::group_by_host(per_rank);
  topo::Placement placement;
  try {
    placement = place_mesh(shape, job.hosts);
  } catch (const InvalidArgument& e) {
    // Same inputs on every rank: every rank takes this branch together.
    CHORUS_INFO(kLogPar, "mesh: no topology placement (", e.what(), "); rank order");
    return std::nullopt;
  }
  if (placement.layout == "naive" || placement.cost >= placement.naive_cost - 1e-9)
    return std::nullopt;
  // Mesh rank m goes to the world rank running in its slot: slot (host h, local l) is the l-th
  // rank of host h, the rank a launcher binds to that slot's cores.
  std::vector<int> mesh_of_world(per_rank.size(), -1);
  for (const topo::RankPlacement& rp : placement.ranks) {
    int world_rank = -1;
    for (size_t w = 0; w < per_rank.size(); ++w)
      if (job.host_of_rank[w] == rp.slot.host && job.local_rank[w] == rp.slot.local)
        world_rank = static_cast<int>(w);
    CHORUS_CHECK(world_rank >= 0 && mesh_of_world[static_cast<size_t>(world_rank)] < 0,
                 "mesh placement: slot ", rp.slot.local, " of host ", rp.slot.host,
                 " has no rank of its own");
    mesh_of_world[static_cast<size_t>(world_rank)] = rp.rank;
  }
  *layout = placement.layout;
  return mesh_of_world;
}

}  // namespace

DeviceMesh::DeviceMesh(Communicator& world, MeshShape shape, MeshOptions options)
    : impl_(std::make_unique<Impl>()) {
  CHORUS_ARG_CHECK(shape.dp >= 1 && shape.tp >= 1 && shape.pp >= 1, "mesh dp=", shape.dp,
                   " tp=", shape.tp, " pp=", shape.pp, ": every axis needs at least one rank");
  CHORUS_ARG_CHECK(static_cast<int64_t>(shape.dp) * shape.tp * shape.pp == world.size(),
                   "mesh dp=", shape.dp, " x tp=", shape.tp, " x pp=", shape.pp, " = ",
                   static_cast<int64_t>(shape.dp) * shape.tp * shape.pp,
                   " ranks does not match the world of ", world.size(), " ranks");
  Impl& m = *impl_;
  m.world = &world;
  m.shape = shape;
  const size_t n = static_cast<size_t>(world.size());
  m.mesh_of_world.resize(n);
  for (size_t w = 0; w < n; ++w) m.mesh_of_world[w] = static_cast<int>(w);
  if (options.placement == MeshOptions::Placement::kTopology && world.size() > 1)
    if (auto placed = placed_order(world, shape, &m.layout)) m.mesh_of_world = std::move(*placed);
  m.world_of_mesh.assign(n, -1);
  for (size_t w = 0; w < n; ++w)
    m.world_of_mesh[static_cast<size_t>(m.mesh_of_world[w])] = static_cast<int>(w);

  // One split per axis: the color is the coordinate with that axis zeroed (the same for the
  // whole group), the key the index along the axis.
  const MeshCoord c = shape.coord_of(m.mesh_of_world[static_cast<size_t>(world.rank())]);
  auto color_without = [&](Axis axis) {
    MeshCoord k = c;
    k[axis] = 0;
    return shape.rank_of(k);
  };
  // Groups are numbered along the other axes, fastest first: dp group tp + tp * pp, tp group
  // dp + dp * pp, pp group tp + tp * dp, mp group dp. Errors name a rank by its group and world
  // rank ("rank 1 of tp group 0 (world rank 3)").
  auto name = [](const char* axis, int index) {
    return std::string(axis) + " group " + std::to_string(index);
  };
  m.dp = world.split(color_without(Axis::kDp), c.dp, name("dp", c.tp + shape.tp * c.pp));
  m.tp = world.split(color_without(Axis::kTp), c.tp, name("tp", c.dp + shape.dp * c.pp));
  m.pp = world.split(color_without(Axis::kPp), c.pp, name("pp", c.tp + shape.tp * c.dp));
  m.mp = world.split(c.dp, c.tp + shape.tp * c.pp, name("mp", c.dp));
  // Before anything computes on the mesh (a pipeline measures its layers, tensor parallelism
  // runs its layers): every rank uses rank 0's kernels, pinned by rule when deterministic.
  agree_on_kernels(world);
  CHORUS_INFO(kLogPar, describe());
}

DeviceMesh::~DeviceMesh() = default;
DeviceMesh::DeviceMesh(DeviceMesh&&) noexcept = default;
DeviceMesh& DeviceMesh::operator=(DeviceMesh&&) noexcept = default;

const MeshShape& DeviceMesh::shape() const { return impl_->shape; }
int DeviceMesh::mesh_rank() const {
  return impl_->mesh_of_world[static_cast<size_t>(impl_->world->rank())];
}
MeshCoord DeviceMesh::coord() const { return impl_->shape.coord_of(mesh_rank()); }
const std::vector<int>& DeviceMesh::mesh_rank_of_world() const { return impl_->mesh_of_world; }
int DeviceMesh::world_rank_of(const MeshCoord& coord) const {
  return impl_->world_of_mesh[static_cast<size_t>(impl_->shape.rank_of(coord))];
}
const std::string& DeviceMesh::layout() const { return impl_->layout; }

Communicator& DeviceMesh::world() { return *impl_->world; }
Communicator& DeviceMesh::dp() { return *impl_->dp; }
Communicator& DeviceMesh::tp() { return *impl_->tp; }
Communicator& DeviceMesh::pp() { return *impl_->pp; }
Communicator& DeviceMesh::mp() { return *impl_->mp; }
Communicator& DeviceMesh::group(Axis axis) {
  return axis == Axis::kDp ? dp() : axis == Axis::kTp ? tp() : pp();
}

std::string DeviceMesh::describe() const {
  const MeshShape& s = impl_->shape;
  const MeshCoord c = coord();
  std::ostringstream os;
  os << "mesh dp=" << s.dp << " tp=" << s.tp << " pp=" << s.pp << " (" << s.order_string() << ", "
     << impl_->layout << "): world rank " << impl_->world->rank() << " = mesh rank " << mesh_rank()
     << " = dp " << c.dp << ", tp " << c.tp << ", pp " << c.pp;
  return os.str();
}

}  // namespace chorus::parallel
