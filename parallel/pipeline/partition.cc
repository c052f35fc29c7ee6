// Stage boundaries from measured cost: the contiguous cut of the blocks into virtual stages that
// minimises the most expensive stage (the embedding counted with the first, the head with the
// last), by dynamic programming over (stages, blocks).
#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>

#include "chorus/error.h"
#include "chorus/parallel/pipeline.h"
#include "chorus/tensor/autograd.h"
#include "chorus/tensor/device.h"

namespace chorus::parallel {

std::vector<int64_t> balance_layers(const std::vector<double>& costs, int parts) {
  CHORUS_ARG_CHECK(costs.size() >= 3, "balance_layers: ", costs.size(),
                   " costs (expected the embedding, every block and the head)");
  const int64_t layers = static_cast<int64_t>(costs.size()) - 2;
  CHORUS_ARG_CHECK(parts >= 1 && layers >= parts, "pipeline: ", layers, " layers for ", parts,
                   " stages (every stage needs at least one block)");
  for (double c : costs) CHORUS_ARG_CHECK(c >= 0, "balance_layers: a negative cost");
  // prefix[i] = cost of blocks [0, i); a stage [a, b) costs prefix[b] - prefix[a], plus the
  // embedding when a == 0 and the head when b == layers.
  std::vector<double> prefix(static_cast<size_t>(layers) + 1, 0.0);
  for (int64_t i = 0; i < layers; ++i)
    prefix[i + 1] = prefix[i] + costs[static_cast<size_t>(i) + 1];
  auto stage_cost = [&](int64_t a, int64_t b) {
    return prefix[b] - prefix[a] + (a == 0 ? costs.front() : 0.0) +
           (b == layers ? costs.back() : 0.0);
  };
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][b]: the smallest maximum over k stages covering blocks [0, b); cut[k][b] its last cut.
  std::vector<std::vector<double>> best(static_cast<size_t>(parts) + 1,
                                        std::vector<double>(static_cast<size_t>(layers) + 1, inf));
  std::vector<std::vector<int64_t>> cut(best.size(), std::vector<int64_t>(best[0].size(), 0));
  best[0][0] = 0;
  for (int k = 1; k <= parts; ++k)
    for (int64_t b = k; b <= layers; ++b)
      for (int64_t a = k - 1; a < b; ++a) {
        const double v = std::max(best[k - 1][a], stage_cost(a, b));
        // Ties go to the later cut: earlier stages take fewer blocks, as the first stage
        // already carries the embedding.
        if (v <= best[k][b]) {
          best[k][b] = v;
          cut[k][b] = a;
        }
      }
  std::vector<int64_t> bounds(static_cast<size_t>(parts) + 1);
  bounds[static_cast<size_t>(parts)] = layers;
  for (int k = parts; k > 0; --k)
    bounds[static_cast<size_t>(k) - 1] = cut[k][bounds[static_cast<size_t>(k)]];
  return bounds;
}

namespace {

// The median time of fn over `reps` runs after one warm-up, each to the end of its device work.
double median_seconds(int reps, tensor::Device device, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    tensor::synchronize(device);  // a GPU's kernels are timed to their end
    if (r > 0)
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

std::vector<double> measure_layer_costs(tensor::nn::GPT& model, int64_t micro_batch, int reps) {
  using tensor::Tensor;
  const tensor::nn::GPTConfig& cfg = model.config();
  std::vector<int64_t> ids(static_cast<size_t>(micro_batch * cfg.context));
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<int64_t>(i % static_cast<size_t>(cfg.vocab));
  const tensor::Device device = model.wte->weight.device();
  const Tensor idx =
      Tensor::from_vector(std::span<const int64_t>(ids), {micro_batch, cfg.context}).to(device);
  // Measured on detached copies of the inputs, so nothing accumulates into the model's
  // gradients beyond what zero_grad() drops afterwards.
  std::vector<double> costs;
  Tensor x = model.embed(idx).detach();
  costs.push_back(median_seconds(reps, device, [&] { tensor::sum(model.embed(idx)).backward(); }));
  for (int64_t i = 0; i < cfg.layers; ++i) {
    Tensor in = x.detach();
    in.set_requires_grad(true);
    costs.push_back(
        median_seconds(reps, device, [&] { tensor::sum(model.blocks(in, i, i + 1)).backward(); }));
  }
  {
    Tensor in = x.detach();
    in.set_requires_grad(true);
    costs.push_back(median_seconds(reps, device, [&] {
      const int64_t N = idx.numel();
      Tensor logits = model.head(in);
      model.wte->tied_loss(logits.view({N, logits.size(-1)}), idx.reshape({N})).backward();
    }));
  }
  model.zero_grad();
  return costs;
}

}  // namespace chorus::parallel
