#include "local_probe.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "chorus/cost_model.h"
#include "chorus/tensor/amp.h"
#include "chorus/tensor/gemm.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/ops.h"
#include "chorus/tensor/random.h"
#include "chorus/tune_table.h"

namespace chorus::plan {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double gemm_flops() {
  const int64_t n = 512;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  tensor::set_num_threads(1);
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = Clock::now();
    tensor::gemm(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    if (rep > 0) best = std::min(best, since(t0));
  }
  return 2.0 * double(n * n * n) / best;
}

double copy_bytes_per_s() {
  const size_t bytes = size_t(64) << 20;
  std::vector<char> a(bytes, 1), b(bytes, 0);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::min(best, since(t0));
  }
  return double(bytes) / best;
}

}  // namespace

Cluster local_cluster() {
  Cluster c;
  c.name = "local";
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  c.per_node = ::sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : 1;
  c.device = "this CPU, one core per rank";
  const double memory = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  c.memory_bytes = memory / c.per_node;  // the ranks share the host's memory
  c.f32_flops = c.bf16_flops = gemm_flops();
  const double copy = copy_bytes_per_s();
  c.hbm_bytes_per_s = copy;
  c.source = "measured: f32 GEMM 512^3 on one thread";
  c.intra = {5e-6, copy / 2};
  std::string links =
      "; links: a 64 MiB copy's bandwidth / 2, 5 us per step (no cost model: CHORUS_TUNE=off)";
  try {
    if (tuning_enabled()) {
      auto costs = std::make_shared<const CostModel>();
      // Collectives: the selector's model (GroupCollectives). Point-to-point: the all-reduce
      // ring's constants at this host's rank count (else the nearest fitted) in its largest
      // size band (activations are megabytes), one step a message, else the model's defaults.
      const FittedCost* ring = nullptr;
      const auto entries = costs->entries();
      for (const auto& e : entries)
        if (e.link == "shm" && e.collective == "all_reduce" && e.algorithm == "ring" &&
            e.beta_us_per_mib > 0 &&
            (ring == nullptr ||
             std::pair(-std::abs(e.world_size - c.per_node), e.band_from_bytes) >
                 std::pair(-std::abs(ring->world_size - c.per_node), ring->band_from_bytes)))
          ring = &e;
      const double alpha_us = ring != nullptr ? ring->alpha_us : 2.0;
      const double beta_us_per_mib = ring != nullptr ? ring->beta_us_per_mib : 256.0;
      c.intra = {alpha_us * 1e-6, double(1 << 20) / (beta_us_per_mib * 1e-6)};
      links =
          "; collectives: the selector's cost model, " +
          (costs->fitted() ? "constants chorus-tune fitted per algorithm (" + costs->origin() + ")"
                           : std::string("its defaults (no chorus-tune constants)"));
      c.costs = std::move(costs);
    }
  } catch (const std::exception&) {
    // A malformed constants file: the probe's link stands.
  }
  c.source += links;
  c.inter = c.intra;
  c.compute_efficiency = 1;  // measured rates
  c.link_efficiency = 1;
  return c;
}

namespace {

// Seconds of one block's forward and backward on b sequences (the median of three after a warm-up).
double time_block(const Setup& s, int64_t b, bool moe) {
  const ModelShape& m = s.model;
  tensor::nn::GPTConfig cfg;
  cfg.vocab = m.vocab;
  cfg.context = m.context;
  cfg.layers = 1;
  cfg.heads = m.heads;
  cfg.width = m.width;
  cfg.experts = moe ? m.experts : 0;
  cfg.top_k = m.top_k;
  cfg.capacity_factor = m.capacity_factor;
  tensor::nn::Block block(cfg, moe);
  block.init(1);
  tensor::Tensor x = tensor::Tensor::empty({b, m.context, m.width});
  tensor::fill_normal_(x, {1, 2}, 0.0, 1.0);
  x.set_requires_grad(true);
  const DataType lowp = s.dtype == "bf16"  ? DataType::kBF16
                        : s.dtype == "f16" ? DataType::kF16
                                           : DataType::kF32;
  std::vector<double> t;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = Clock::now();
    {
      tensor::AutocastGuard autocast(lowp);
      tensor::sum(block.forward(x, {})).backward();
    }
    if (rep > 0) t.push_back(since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

std::set<int64_t> local_micro_batch_sizes(const Setup& s, int world) {
  std::set<int64_t> sizes;
  if (s.micro_batch_size > 0) return {s.micro_batch_size};
  for (int dp = 1; dp <= world; ++dp) {
    if (world % dp != 0 || s.batch % dp != 0) continue;
    const int64_t local = s.batch / dp;
    if (s.micro_batches > 0) {
      if (local % s.micro_batches == 0) sizes.insert(local / s.micro_batches);
      continue;
    }
    for (int64_t k = 1; k <= local; ++k)
      if (local % k == 0) sizes.insert(local / k);
  }
  return sizes;
}

void calibrate_local(Cluster& c, const Setup& s) {
  const ModelShape& m = s.model;
  tensor::set_num_threads(1);
  // The blocks' FLOPs (model_flops' per-layer terms) over b sequences, dense and MoE blocks in the
  // model's proportion: the rate is the model's blocks' FLOPs over their time.
  int64_t moe_blocks = 0;
  for (int64_t i = 0; i < m.layers; ++i) moe_blocks += m.moe_block(i) ? 1 : 0;
  const int64_t dense_blocks = m.layers - moe_blocks;
  ModelShape dense = m, moe = m;
  dense.layers = moe.layers = 1;
  dense.vocab = moe.vocab = 0;
  dense.experts = 0;
  moe.moe_every = 1;
  std::string rates;
  c.model_flops_per_s.clear();
  for (const int64_t b : local_micro_batch_sizes(s, c.world())) {
    const double tokens = double(b) * double(m.context);
    double flops = 0, seconds = 0;
    if (dense_blocks > 0) {
      flops += double(dense_blocks) * model_flops(dense, tokens);
      seconds += double(dense_blocks) * time_block(s, b, false);
    }
    if (moe_blocks > 0) {
      flops += double(moe_blocks) * model_flops(moe, tokens);
      seconds += double(moe_blocks) * time_block(s, b, true);
    }
    c.model_flops_per_s[b] = flops / seconds;
    rates += (rates.empty() ? "" : ", ") + std::to_string(b) + ": " +
             std::to_string(static_cast<int64_t>(flops / seconds / 1e9));
  }
  c.source +=
      std::string("; compute: the model's blocks") + (moe_blocks > 0 ? " (dense and MoE)" : "") +
      " forward and backward, measured by micro-batch size in sequences (GFLOP/s " + rates + ")";
}

}  // namespace chorus::plan
