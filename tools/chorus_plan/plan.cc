#include "plan.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "error.h"

namespace chorus::plan {
namespace {

std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  return buf;
}

MeshPlan evaluate(const Setup& s, const Cluster& c, MeshChoice m, int micro_batches) {
  MeshPlan p;
  m.micro_batches = micro_batches;
  m.micro_batch_size = s.batch / m.dp / micro_batches;
  p.mesh = m;
  p.memory = estimate_memory(s, m);
  p.time = estimate_step(s, m, c);
  p.fits = p.memory.peak <= c.memory_bytes;
  return p;
}

// Better: fits before not; then faster; among those that do not fit, smaller peak.
bool better(const MeshPlan& a, const MeshPlan& b) {
  if (a.fits != b.fits) return a.fits;
  if (a.fits) return a.time.tokens_per_s > b.time.tokens_per_s;
  return a.memory.peak < b.memory.peak;
}

}  // namespace

std::string mesh_name(const MeshChoice& m) {
  return "dp=" + std::to_string(m.dp) + " tp=" + std::to_string(m.tp) +
         " pp=" + std::to_string(m.pp) + (m.ep > 1 ? " ep=" + std::to_string(m.ep) : "");
}

Plan make_plan(const Setup& s, const Cluster& c, const MeshRequest& request) {
  Plan plan;
  plan.setup = s;
  plan.cluster = c;
  const std::vector<MeshCandidate> candidates = enumerate_meshes(s, c.world(), request);
  const bool all_fixed = request.dp > 0 && request.tp > 0 && request.pp > 0;
  for (const MeshCandidate& cand : candidates) {
    if (!cand.invalid.empty()) {
      if (all_fixed) fail("cannot run " + mesh_name(cand.mesh) + ": " + cand.invalid);
      MeshPlan p;
      p.mesh = cand.mesh;
      p.invalid = cand.invalid;
      plan.meshes.push_back(p);
      continue;
    }
    std::optional<MeshPlan> best;
    for (int k : micro_batch_options(s, cand.mesh.dp, cand.mesh.pp)) {
      MeshPlan p = evaluate(s, c, cand.mesh, k);
      if (!best || better(p, *best)) best = p;
    }
    plan.meshes.push_back(*best);
  }
  std::stable_sort(plan.meshes.begin(), plan.meshes.end(), [](const auto& a, const auto& b) {
    if (a.invalid.empty() != b.invalid.empty()) return a.invalid.empty();
    if (!a.invalid.empty()) return false;
    return better(a, b);
  });
  if (plan.meshes.empty() || !plan.meshes[0].invalid.empty()) {
    std::string why;
    for (const MeshPlan& m : plan.meshes) why += "; " + mesh_name(m.mesh) + ": " + m.invalid;
    fail("chorus can run this set-up at no mesh of " + std::to_string(c.world()) + " devices" +
         why);
  }
  const MeshPlan& top = plan.meshes[0];
  if (!top.fits) {
    plan.reason = "no mesh fits in " + gb(c.memory_bytes) + ": the smallest peak is " +
                  gb(top.memory.peak) + " at " + mesh_name(top.mesh) +
                  "; try a higher --zero, --checkpoint-activations, a smaller micro-batch or "
                  "more --nodes";
    return plan;
  }
  plan.recommended = 0;
  char buf[512];
  const MeshPlan* next =
      plan.meshes.size() > 1 && plan.meshes[1].invalid.empty() && plan.meshes[1].fits
          ? &plan.meshes[1]
          : nullptr;
  std::string why;
  if (top.mesh.ep > 1 && top.mesh.tp == 1 && top.mesh.pp == 1)
    why =
        "the experts spread over ep ranks free the memory and optimizer time they would take "
        "on every rank";
  else if (top.mesh.tp == 1 && top.mesh.pp == 1)
    why =
        "data parallelism alone fits, and tensor or pipeline parallelism would only add "
        "traffic and a bubble";
  else if (top.mesh.tp > 1 && top.mesh.pp == 1)
    why = "tensor parallelism inside the node is faster than what fits without it";
  else
    why = "the fastest split that fits";
  std::snprintf(buf, sizeof buf, "recommended: %s, %d micro-batch(es) of %lld: %s (%.0f tokens/s",
                mesh_name(top.mesh).c_str(), top.mesh.micro_batches,
                static_cast<long long>(top.mesh.micro_batch_size), why.c_str(),
                top.time.tokens_per_s);
  plan.reason = buf;
  if (next != nullptr) {
    std::snprintf(buf, sizeof buf, ", %.2fx %s", top.time.tokens_per_s / next->time.tokens_per_s,
                  mesh_name(next->mesh).c_str());
    plan.reason += buf;
  }
  plan.reason += "; peak " + gb(top.memory.peak) + " of " + gb(c.memory_bytes) + ")";
  return plan;
}

}  // namespace chorus::plan
