// Sources apart, the deterministic mode's arithmetic of an expert-parallel layer
// (expert_parallel.h): each source's gradient of a local expert, and their fold over the
// replicas in the global batch's order.
#include "chorus/parallel/expert_parallel.h"
#include "chorus/tensor/autograd.h"

namespace chorus::parallel {

using tensor::Tensor;

const tensor::nn::MLP& ExpertParallelMoE::source_expert(int64_t l, int s) const {
  const size_t P = static_cast<size_t>(ep_->size()), k = static_cast<size_t>(l) * P + s;
  if (shadows_.size() != experts.size() * P) {
    shadows_.resize(experts.size() * P);
    pending_.assign(experts.size() * P, {});
  }
  auto& shadow = shadows_[k];
  if (!shadow) shadow = std::make_shared<tensor::nn::MLP>(cfg_);
  const auto& expert = experts[static_cast<size_t>(l)];
  for (auto [mine, real] :
       {std::pair{shadow->c_fc, expert->c_fc}, std::pair{shadow->c_proj, expert->c_proj}}) {
    mine->weight = real->weight.detach();
    mine->weight.set_requires_grad(true);
    mine->bias = real->bias.detach();
    mine->bias.set_requires_grad(true);
  }
  pending_[k].push_back(
      {shadow->c_fc->weight, shadow->c_fc->bias, shadow->c_proj->weight, shadow->c_proj->bias});
  return *shadow;
}

std::vector<std::vector<Tensor>> ExpertParallelMoE::take_source_gradients() {
  const size_t L = experts.size(), P = static_cast<size_t>(ep_->size());
  std::vector<std::vector<Tensor>> out(4 * L, std::vector<Tensor>(P));
  for (size_t k = 0; k < pending_.size(); ++k) {
    auto& leaves = pending_[k];
    // The forward this backward went through: the last with gradients (before it, forwards
    // whose graph is gone: a checkpointed block's first run); after it, forwards still waiting
    // for their backward (a pipeline's later micro-batches).
    size_t done = leaves.size();
    for (size_t j = 0; j < leaves.size(); ++j)
      if (leaves[j][0].grad().defined()) done = j;
    if (done == leaves.size()) continue;
    const size_t l = k / P, s = k % P;
    for (size_t i = 0; i < 4; ++i) out[4 * l + i][s] = leaves[done][i].grad();
    leaves.erase(leaves.begin(), leaves.begin() + static_cast<std::ptrdiff_t>(done) + 1);
    if (leaves.empty())  // the shadow lets go of the last leaves (and their gradients)
      for (auto* lin : {shadows_[k]->c_fc.get(), shadows_[k]->c_proj.get()})
        lin->weight = lin->bias = Tensor();
  }
  return out;
}

namespace {

std::vector<ExpertParallelMoE*> expert_layers(tensor::nn::GPT& model) {
  std::vector<ExpertParallelMoE*> layers;
  for (const auto& block : model.h)
    if (auto* moe = dynamic_cast<ExpertParallelMoE*>(block->moe.get())) layers.push_back(moe);
  CHORUS_ARG_CHECK(!layers.empty(), "expert parallel: the model has no expert-parallel layer");
  return layers;
}

}  // namespace

void keep_expert_sources_apart(tensor::nn::GPT& model) {
  for (ExpertParallelMoE* moe : expert_layers(model)) moe->keep_sources_apart(true);
}

void fold_expert_gradients(tensor::nn::GPT& model, Communicator& replicas) {
  tensor::NoGradGuard no_grad;
  const size_t G = static_cast<size_t>(replicas.size());
  for (ExpertParallelMoE* moe : expert_layers(model)) {
    CHORUS_ARG_CHECK(moe->sources_apart(),
                     "fold_expert_gradients: the layers do not keep their sources apart");
    const std::vector<std::vector<Tensor>> grads = moe->take_source_gradients();
    std::vector<Tensor> params;
    for (const auto& e : moe->experts)
      for (const Tensor& t : {e->c_fc->weight, e->c_fc->bias, e->c_proj->weight, e->c_proj->bias})
        params.push_back(t);
    const size_t P = grads.empty() ? 0 : grads[0].size();
    // One buffer per rank: every (parameter, source) gradient in turn (zeros where none), and
    // which of them there are.
    int64_t total = 0;
    for (const Tensor& p : params) total += p.numel() * static_cast<int64_t>(P);
    const Tensor mine = Tensor::zeros({total}, params[0].dtype(), params[0].device());
    std::vector<int64_t> have(params.size() * P, 0);
    int64_t at = 0;
    for (size_t i = 0; i < params.size(); ++i)
      for (size_t s = 0; s < P; ++s) {
        const int64_t n = params[i].numel();
        if (grads[i][s].defined()) {
          mine.narrow(0, at, n).copy_(grads[i][s].contiguous().view({n}));
          have[i * P + s] = 1;
        }
        at += n;
      }
    const Tensor all =
        Tensor::empty({static_cast<int64_t>(G) * total}, mine.dtype(), mine.device());
    std::vector<int64_t> all_have(G * have.size());
    replicas.all_gather(mine.data_ptr(), all.data_ptr(), static_cast<size_t>(total), mine.dtype());
    replicas.all_gather(have.data(), all_have.data(), have.size(), DataType::kI64);
    // Onto the running sums in the global batch's order: replica g's source s is micro-batch
    // g ep + s of this micro-step.
    for (size_t g = 0; g < G; ++g) {
      int64_t pos = static_cast<int64_t>(g) * total;
      for (size_t i = 0; i < params.size(); ++i) {
        Tensor p = params[i];
        const int64_t n = p.numel();
        for (size_t s = 0; s < P; ++s, pos += n) {
          if (all_have[g * have.size() + i * P + s] == 0) continue;
          const Tensor c = all.narrow(0, pos, n).view(p.shape());
          if (!p.grad().defined())
            p.set_grad(c.clone());
          else
            tensor::accumulate_grad(p.grad(), c);
        }
      }
    }
  }
}

}  // namespace chorus::parallel
