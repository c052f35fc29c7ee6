// ExpertParallelMoE and expert_parallel(): an MoE layer's experts over an ep group
// (expert_parallel.h).
#include "chorus/parallel/expert_parallel.h"

#include <span>
#include <string>

#include "chorus/tensor/autograd.h"
#include "common/fault_injection.h"

namespace chorus::parallel {
namespace {

using tensor::Tensor;

Tensor index_tensor(const std::vector<int64_t>& v, tensor::Device device) {
  return Tensor::from_vector(std::span<const int64_t>(v), {static_cast<int64_t>(v.size())})
      .to(device);
}

// The first expert of this rank (checks that ep divides E, on every rank alike).
int64_t first_expert_of(const tensor::nn::GPTConfig& cfg, const Communicator& ep) {
  CHORUS_ARG_CHECK(cfg.experts > 0, "expert parallel: the model has no experts");
  CHORUS_ARG_CHECK(cfg.experts % ep.size() == 0, "expert parallel: ", cfg.experts,
                   " experts do not divide over ep=", ep.size(),
                   " (every rank holds the same number of experts)");
  return cfg.experts / ep.size() * ep.rank();
}

}  // namespace

ExpertParallelMoE::ExpertParallelMoE(const tensor::nn::GPTConfig& cfg, const tensor::nn::MoE& full,
                                     Communicator& ep)
    : MoE(cfg, first_expert_of(cfg, ep), cfg.experts / ep.size()),
      ep_(&ep),
      first_(first_expert_of(cfg, ep)),
      cfg_(cfg) {
  CHORUS_ARG_CHECK(
      full.num_experts() == cfg.experts && static_cast<int64_t>(full.experts.size()) == cfg.experts,
      "expert parallel: the layer to slice must hold all ", cfg.experts, " experts");
  to(full.router->weight.dtype());
  tensor::NoGradGuard no_grad;
  router->weight.copy_(full.router->weight);
  for (size_t l = 0; l < experts.size(); ++l)
    experts[l]->load_state_dict(full.experts[static_cast<size_t>(first_) + l]->state_dict());
}

Tensor ExpertParallelMoE::forward(const Tensor& x, tensor::nn::MoEStats* stats) const {
  return hooked([&] {
    const int64_t E = num_experts(), L = static_cast<int64_t>(experts.size());
    const int64_t C = router->weight.size(1);
    const int P = ep_->size();
    CHORUS_ARG_CHECK(x.dim() >= 1 && x.size(-1) == C, "expert parallel MoE: input must be (..., ",
                     C, "), got ", tensor::to_string(x.shape()));
    const int64_t N = x.numel() / C;
    const Tensor xf = x.reshape({N, C});
    const Tensor logits = router->forward(xf);     // (N, E)
    const Tensor probs = tensor::softmax(logits);  // (N, E)
    tensor::nn::MoERouting routing = route(probs);
    // Tests only: rank 0's first token for expert 0 goes to the next rank's first expert.
    if (P > 1 && ep_->rank() == 0 && !routing.tokens[0].empty() &&
        injected_fault() == Fault::kExpertWrongRank) {
      auto& to = routing.tokens[static_cast<size_t>(L)];
      to.insert(to.begin(), routing.tokens[0].front());
      routing.tokens[0].erase(routing.tokens[0].begin());
    }

    // Counts first: send_counts[e] rows for expert e (on rank e / L); recv_counts[s L + l] rows
    // from rank s for local expert l.
    std::vector<int64_t> send_counts(static_cast<size_t>(E)), recv_counts(static_cast<size_t>(E));
    std::vector<int64_t> send_idx;
    for (int64_t e = 0; e < E; ++e) {
      const auto& rows = routing.tokens[static_cast<size_t>(e)];
      send_counts[static_cast<size_t>(e)] = static_cast<int64_t>(rows.size());
      send_idx.insert(send_idx.end(), rows.begin(), rows.end());
    }
    ep_->all_to_all(send_counts.data(), recv_counts.data(), static_cast<size_t>(L), DataType::kI64);
    std::vector<int64_t> send_rows(static_cast<size_t>(P), 0), recv_rows(send_rows);
    for (int p = 0; p < P; ++p)
      for (int64_t l = 0; l < L; ++l) {
        send_rows[static_cast<size_t>(p)] += send_counts[static_cast<size_t>(p * L + l)];
        recv_rows[static_cast<size_t>(p)] += recv_counts[static_cast<size_t>(p * L + l)];
      }

    // Dispatch: rows by destination, expert, token.
    const Tensor xs = tensor::gather_rows(xf, index_tensor(send_idx, x.device()));
    const Tensor xr = exchange_rows(xs, send_rows, recv_rows, *ep_);  // (R, C) by source

    // Each local expert once, on its rows from every source in source order (sources apart: once
    // per source, on that source's leaves). yr starts as 0 * xr, so that the combine is recorded
    // (and its backward run) on every rank alike.
    Tensor yr = tensor::scale(xr, 0.0);
    if (apart_) {
      int64_t at = 0;
      for (int s = 0; s < P; ++s)
        for (int64_t l = 0; l < L; ++l) {
          const int64_t n = recv_counts[static_cast<size_t>(s * L + l)];
          if (n > 0) {
            std::vector<int64_t> rows(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = at + i;
            const Tensor idx = index_tensor(rows, x.device());
            yr = tensor::index_add_rows(yr, idx,
                                        source_expert(l, s).forward(tensor::gather_rows(xr, idx)));
          }
          at += n;
        }
    }
    for (int64_t l = 0; l < L && !apart_; ++l) {
      std::vector<int64_t> rows;
      int64_t at = 0;
      for (int s = 0; s < P; ++s)
        for (int64_t j = 0; j < L; ++j) {
          const int64_t n = recv_counts[static_cast<size_t>(s * L + j)];
          if (j == l)
            for (int64_t i = 0; i < n; ++i) rows.push_back(at + i);
          at += n;
        }
      if (rows.empty()) continue;
      const Tensor idx = index_tensor(rows, x.device());
      const Tensor y = experts[static_cast<size_t>(l)]->forward(tensor::gather_rows(xr, idx));
      yr = tensor::index_add_rows(yr, idx, y);
    }

    // Combine: the outputs back in send_idx's order, gated and added in expert order.
    const Tensor ys = exchange_rows(yr, recv_rows, send_rows, *ep_);  // (S, C)
    Tensor out = Tensor::zeros({N, C}, x.dtype(), x.device());
    const Tensor p_flat = probs.view({N * E, 1});
    int64_t pos = 0;
    for (int64_t e = 0; e < E; ++e) {
      const auto& rows = routing.tokens[static_cast<size_t>(e)];
      if (rows.empty()) continue;
      const auto m = static_cast<int64_t>(rows.size());
      std::vector<int64_t> at(rows.size()), here(rows.size());
      for (size_t i = 0; i < rows.size(); ++i) {
        at[i] = rows[i] * E + e;
        here[i] = pos + static_cast<int64_t>(i);
      }
      const Tensor gate = tensor::gather_rows(p_flat, index_tensor(at, x.device())).view({m});
      const Tensor y = tensor::gather_rows(ys, index_tensor(here, x.device()));
      out =
          tensor::index_add_rows(out, index_tensor(rows, x.device()), tensor::scale_rows(y, gate));
      pos += m;
    }
    // No token of this rank kept: ys (0, C) still joins the output, so that its backward (an
    // exchange the other ranks take part in) runs here too.
    if (send_idx.empty()) out = tensor::index_add_rows(out, index_tensor({}, x.device()), ys);
    losses(logits, probs, std::move(routing), stats);
    return out.view(x.shape());
  });
}

void expert_parallel(tensor::nn::GPT& model, Communicator& ep) {
  const tensor::nn::GPTConfig& cfg = model.config();
  first_expert_of(cfg, ep);  // the checks, before anything changes
  for (size_t i = 0; i < model.h.size(); ++i) {
    const auto& moe = model.h[i]->moe;
    if (!moe) continue;
    CHORUS_ARG_CHECK(dynamic_cast<const ExpertParallelMoE*>(moe.get()) == nullptr,
                     "expert parallel: the model is expert parallel already");
    model.replace_module("h." + std::to_string(i) + ".mlp",
                         std::make_shared<ExpertParallelMoE>(cfg, *moe, ep));
  }
}

}  // namespace chorus::parallel
