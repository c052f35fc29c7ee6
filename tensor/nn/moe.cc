// The mixture-of-experts MLP (nn.h: MoE): a softmax router, top-k choice with a capacity, and
// E expert MLPs, each run on its tokens as one batch and added into the output in expert order.
#include <algorithm>
#include <cmath>
#include <span>
#include <string>

#include "chorus/tensor/nn.h"

namespace chorus::tensor::nn {

MoE::MoE(const GPTConfig& cfg) : MoE(cfg, 0, cfg.experts) {}

MoE::MoE(const GPTConfig& cfg, int64_t first, int64_t count)
    : top_k(cfg.top_k), capacity_factor(cfg.capacity_factor), num_experts_(cfg.experts) {
  CHORUS_ARG_CHECK(cfg.experts >= 1, "MoE: experts must be at least 1, got ", cfg.experts);
  CHORUS_ARG_CHECK(cfg.top_k == 1 || cfg.top_k == 2, "MoE: top_k must be 1 or 2, got ", cfg.top_k);
  CHORUS_ARG_CHECK(cfg.top_k <= cfg.experts, "MoE: top_k ", cfg.top_k, " exceeds the ", cfg.experts,
                   " experts");
  CHORUS_ARG_CHECK(cfg.capacity_factor >= 0 && std::isfinite(cfg.capacity_factor),
                   "MoE: capacity_factor must be 0 (dropless) or positive, got ",
                   cfg.capacity_factor);
  CHORUS_ARG_CHECK(first >= 0 && count >= 0 && first + count <= cfg.experts, "MoE: experts [",
                   first, ", ", first + count, ") of ", cfg.experts);
  register_module("router", router, std::make_shared<Linear>(cfg.width, cfg.experts, false));
  experts.resize(static_cast<size_t>(count));  // never resized again
  for (int64_t i = 0; i < count; ++i)
    register_module("experts." + std::to_string(first + i), experts[static_cast<size_t>(i)],
                    std::make_shared<MLP>(cfg));
}

namespace {

Tensor index_tensor(const std::vector<int64_t>& v, Device device) {
  return Tensor::from_vector(std::span<const int64_t>(v), {static_cast<int64_t>(v.size())})
      .to(device);
}

}  // namespace

MoERouting MoE::route(const Tensor& probs) const {
  const int64_t E = num_experts_, K = top_k;
  CHORUS_ARG_CHECK(probs.dim() == 2 && probs.size(1) == E, "MoE: probabilities must be (N, ", E,
                   "), got ", to_string(probs.shape()));
  const int64_t N = probs.size(0);
  // Top-k on the host (ties to the lower expert), then the capacity: every token's first
  // choice before any second choice, tokens in order.
  const std::vector<double> p = probs.to_vector();
  std::vector<int64_t> choice(static_cast<size_t>(N * K));
  MoERouting r;
  r.routed.assign(static_cast<size_t>(E), 0);
  r.kept.assign(static_cast<size_t>(E), 0);
  r.tokens.resize(static_cast<size_t>(E));
  for (int64_t n = 0; n < N; ++n) {
    const double* row = p.data() + n * E;
    int64_t first = 0;
    for (int64_t e = 1; e < E; ++e)
      if (row[e] > row[first]) first = e;
    choice[static_cast<size_t>(n * K)] = first;
    if (K == 2) {
      int64_t second = first == 0 ? 1 : 0;
      for (int64_t e = 0; e < E; ++e)
        if (e != first && row[e] > row[second]) second = e;
      choice[static_cast<size_t>(n * K + 1)] = second;
    }
  }
  for (const int64_t e : choice) ++r.routed[static_cast<size_t>(e)];
  const int64_t capacity =
      capacity_factor > 0
          ? static_cast<int64_t>(
                std::ceil(capacity_factor * static_cast<double>(N * K) / static_cast<double>(E)))
          : N * K;
  for (int64_t j = 0; j < K; ++j)
    for (int64_t n = 0; n < N; ++n) {
      const auto e = static_cast<size_t>(choice[static_cast<size_t>(n * K + j)]);
      if (r.kept[e] < capacity) {
        ++r.kept[e];
        r.tokens[e].push_back(n);
      } else {
        ++r.dropped;
      }
    }
  for (auto& rows : r.tokens) std::sort(rows.begin(), rows.end());
  return r;
}

void MoE::losses(const Tensor& logits, const Tensor& probs, MoERouting routing,
                 MoEStats* stats) const {
  if (!stats) return;
  const int64_t E = num_experts_, K = top_k, N = probs.size(0);
  // Load balance E * sum_e f_e P_e, f_e = routed_e / (N K) (not differentiated),
  // P_e = mean_n p[n, e]: the sum over (n, e) of p[n, e] * E f_e / N.
  std::vector<double> w(static_cast<size_t>(N * E));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < E; ++e)
      w[static_cast<size_t>(n * E + e)] =
          static_cast<double>(E) * static_cast<double>(routing.routed[static_cast<size_t>(e)]) /
          static_cast<double>(N * K) / static_cast<double>(N);
  const Tensor weights =
      Tensor::from_vector(std::span<const double>(w), {N, E}, probs.dtype()).to(probs.device());
  stats->load_balance = sum(mul(probs, weights));
  const Tensor lse = logsumexp(logits);  // (N)
  stats->z_loss = mean(mul(lse, lse));
  stats->routed = std::move(routing.routed);
  stats->kept = std::move(routing.kept);
  stats->dropped = routing.dropped;
}

Tensor MoE::forward(const Tensor& x, MoEStats* stats) const {
  return hooked([&] {
    const int64_t E = num_experts_, C = router->weight.size(1);
    CHORUS_ARG_CHECK(static_cast<int64_t>(experts.size()) == E, "MoE: this module holds ",
                     experts.size(), " of the ", E,
                     " experts (an expert-parallel slice runs its own forward)");
    CHORUS_ARG_CHECK(x.dim() >= 1 && x.size(-1) == C, "MoE: input must be (..., ", C, "), got ",
                     to_string(x.shape()));
    const int64_t N = x.numel() / C;
    const Tensor xf = x.reshape({N, C});
    const Tensor logits = router->forward(xf);  // (N, E)
    const Tensor probs = softmax(logits);       // (N, E)
    MoERouting routing = route(probs);

    // Each expert on its tokens (in token order), gated, added into the output in expert order.
    Tensor out = Tensor::zeros({N, C}, x.dtype(), x.device());
    const Tensor p_flat = probs.view({N * E, 1});
    for (int64_t e = 0; e < E; ++e) {
      const std::vector<int64_t>& rows = routing.tokens[static_cast<size_t>(e)];
      if (rows.empty()) continue;
      std::vector<int64_t> at(rows.size());
      for (size_t i = 0; i < rows.size(); ++i) at[i] = rows[i] * E + e;
      const Tensor idx = index_tensor(rows, x.device());
      const int64_t m = idx.numel();
      const Tensor gate = gather_rows(p_flat, index_tensor(at, x.device())).view({m});
      const Tensor y = experts[static_cast<size_t>(e)]->forward(gather_rows(xf, idx));
      out = index_add_rows(out, idx, scale_rows(y, gate));
    }
    losses(logits, probs, std::move(routing), stats);
    return out.view(x.shape());
  });
}

}  // namespace chorus::tensor::nn
