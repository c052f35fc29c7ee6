#include "mesh.h"

#include "error.h"

namespace chorus::plan {
namespace {

// What chorus-train refuses for a mixture of experts (tools/chorus_train/options.cc).
std::string experts_problem(const Setup& s, int dp, int ep) {
  const ModelShape& m = s.model;
  if (m.experts == 0) return ep == 1 ? "" : "ep=" + std::to_string(ep) + " needs experts";
  if (dp % ep != 0) return "ep=" + std::to_string(ep) + " does not divide dp=" + std::to_string(dp);
  if (m.experts % ep != 0)
    return std::to_string(m.experts) + " experts do not divide over ep=" + std::to_string(ep);
  if (dp > 1 && s.zero == 3) return "ZeRO-3 does not take experts on more than one rank";
  return {};
}

}  // namespace

std::string mesh_problem(const Setup& s, int dp, int tp, int pp, int micro_batches, int ep) {
  const ModelShape& m = s.model;
  if (std::string why = experts_problem(s, dp, ep); !why.empty()) return why;
  const int chunks = pp > 1 && s.schedule == "interleaved" ? s.chunks : 1;
  if (m.heads % tp != 0)
    return std::to_string(m.heads) + " heads do not divide over tp=" + std::to_string(tp);
  if (m.layers < int64_t(pp) * chunks)
    return std::to_string(m.layers) + " layers are fewer than the " + std::to_string(pp * chunks) +
           " stages";
  if (s.zero == 3 && (tp > 1 || pp > 1)) return "ZeRO-3 runs with data parallelism alone";
  if (s.batch % dp != 0)
    return "the batch of " + std::to_string(s.batch) +
           " does not divide over dp=" + std::to_string(dp);
  if (micro_batches > 0) {
    if ((s.batch / dp) % micro_batches != 0)
      return "the replica's batch of " + std::to_string(s.batch / dp) + " does not divide into " +
             std::to_string(micro_batches) + " micro-batches";
    if (pp > 1 && micro_batches < pp)
      return std::to_string(micro_batches) + " micro-batches are fewer than the " +
             std::to_string(pp) + " stages";
    if (chunks > 1 && micro_batches % pp != 0)
      return "the interleaved schedule needs micro-batches in multiples of pp=" +
             std::to_string(pp);
  }
  return {};
}

std::vector<int> micro_batch_options(const Setup& s, int dp, int pp) {
  const int64_t local = s.batch / dp;
  if (s.micro_batches > 0) return {s.micro_batches};
  if (s.micro_batch_size > 0) {
    if (local % s.micro_batch_size != 0) return {};
    return {int(local / s.micro_batch_size)};
  }
  std::vector<int> out;
  for (int64_t k = 1; k <= local && k <= 4096; ++k)
    if (local % k == 0 && k >= pp && mesh_problem(s, dp, 1, pp, int(k)).empty())
      out.push_back(int(k));
  return out;
}

std::vector<MeshCandidate> enumerate_meshes(const Setup& s, int world, const MeshRequest& r) {
  const int fixed = (r.dp > 0 ? r.dp : 1) * (r.tp > 0 ? r.tp : 1) * (r.pp > 0 ? r.pp : 1);
  if (world % fixed != 0)
    fail("the mesh's fixed degrees (dp " + (r.dp > 0 ? std::to_string(r.dp) : "*") + " x tp " +
         (r.tp > 0 ? std::to_string(r.tp) : "*") + " x pp " +
         (r.pp > 0 ? std::to_string(r.pp) : "*") + " = " + std::to_string(fixed) +
         ") do not divide the world of " + std::to_string(world) + " devices");
  if (r.dp > 0 && r.tp > 0 && r.pp > 0 && fixed != world)
    fail("dp x tp x pp = " + std::to_string(fixed) + " is not the world of " +
         std::to_string(world) + " devices");
  std::vector<MeshCandidate> out;
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp != 0 || (r.tp > 0 && tp != r.tp)) continue;
    for (int pp = 1; pp <= world / tp; ++pp) {
      if ((world / tp) % pp != 0 || (r.pp > 0 && pp != r.pp)) continue;
      const int dp = world / tp / pp;
      if (r.dp > 0 && dp != r.dp) continue;
      // A mesh chorus cannot run whatever the ep is listed once.
      const bool hopeless = !mesh_problem(s, dp, tp, pp, 0).empty();
      for (int ep = 1; ep <= dp; ++ep) {
        if (r.ep > 0 ? ep != r.ep
                     : (s.model.experts == 0 ? ep > 1 : dp % ep != 0 || s.model.experts % ep != 0))
          continue;
        if (hopeless && ep > (r.ep > 0 ? r.ep : 1)) break;
        MeshCandidate c;
        c.mesh.dp = dp;
        c.mesh.tp = tp;
        c.mesh.pp = pp;
        c.mesh.ep = ep;
        c.mesh.chunks = pp > 1 && s.schedule == "interleaved" ? s.chunks : 1;
        int fixed_micro = s.micro_batches;
        if (fixed_micro == 0 && s.micro_batch_size > 0 && s.batch % dp == 0) {
          const int64_t local = s.batch / dp;
          if (local % s.micro_batch_size != 0)
            c.invalid = "the replica's batch of " + std::to_string(local) +
                        " does not divide into micro-batches of " +
                        std::to_string(s.micro_batch_size);
          fixed_micro = int(local / s.micro_batch_size);
        }
        if (c.invalid.empty()) c.invalid = mesh_problem(s, dp, tp, pp, fixed_micro, ep);
        if (c.invalid.empty() && micro_batch_options(s, dp, pp).empty())
          c.invalid = "no micro-batch count of the replica's batch of " +
                      std::to_string(s.batch / dp) + " covers the " + std::to_string(pp) +
                      " stages";
        out.push_back(c);
      }
    }
  }
  return out;
}

}  // namespace chorus::plan
