#include <cmath>

#include "backend/backend.h"
#include "chorus/tensor/optim.h"

namespace chorus::tensor::optim {

AdamW::AdamW(nn::NamedTensors params, AdamWOptions options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  for (size_t i = 0; i < params_.size(); ++i) {
    m_.push_back(Tensor::zeros_like(master(i)));
    v_.push_back(Tensor::zeros_like(master(i)));
  }
}

void AdamW::step() {
  ++step_;
  AdamWHyper h;
  h.lr = static_cast<float>(lr_);
  h.beta1 = static_cast<float>(options_.beta1);
  h.beta2 = static_cast<float>(options_.beta2);
  h.beta1_correction = static_cast<float>(1.0 - std::pow(options_.beta1, double(step_)));
  h.beta2_correction = static_cast<float>(1.0 - std::pow(options_.beta2, double(step_)));
  h.eps = static_cast<float>(options_.eps);
  // A GPU's parameters wait here for one fused update (and their write-backs after it).
  std::vector<AdamWTensors> pending;
  std::vector<size_t> pending_index;
  auto flush = [&] {
    if (pending.empty()) return;
    backend_for(pending.front().param.device()).adamw(pending, h);
    for (size_t i : pending_index) write_back(i);
    pending.clear();
    pending_index.clear();
  };
  for_each_param([&](size_t i) {
    const Tensor g = grad_of(i);
    if (!g.defined()) return;
    Tensor& p = master(i);
    const bool decay = options_.decays ? options_.decays(params_[i].first, params_[i].second)
                                       : !options_.decay_matrices_only || p.dim() >= 2;
    CHORUS_ARG_CHECK(p.dtype() == DataType::kF32 || p.dtype() == DataType::kF64, "adamw: dtype ",
                     to_string(p.dtype()), " not supported (f32 or f64; cast first)");
    CHORUS_ARG_CHECK(g.device() == p.device() && m_[i].device() == p.device(), "adamw: '",
                     params_[i].first, "' is on ", to_string(p.device()), " but its ",
                     g.device() != p.device() ? "gradient" : "state", " is on ",
                     to_string(g.device() != p.device() ? g.device() : m_[i].device()),
                     " (build the optimizer after moving the model)");
    AdamWTensors t{p, g, m_[i], v_[i], decay ? static_cast<float>(options_.weight_decay) : 0.0f};
    if (p.device().is_cpu()) {
      backend_for(p.device()).adamw({&t, 1}, h);
      write_back(i);
      return;
    }
    if (!pending.empty() && pending.front().param.device() != p.device()) flush();
    pending.push_back(std::move(t));
    pending_index.push_back(i);
  });
  flush();
}

nn::NamedTensors AdamW::state_dict() const {
  nn::NamedTensors s = Optimizer::state_dict();
  for (size_t i = 0; i < params_.size(); ++i) {
    s.emplace_back(params_[i].first + ".exp_avg", m_[i]);
    s.emplace_back(params_[i].first + ".exp_avg_sq", v_[i]);
    if (masters_[i].defined()) s.emplace_back(params_[i].first + ".master", masters_[i]);
  }
  return s;
}

void AdamW::load_state_dict(const nn::NamedTensors& state) {
  Optimizer::load_state_dict(state);
  for (size_t i = 0; i < params_.size(); ++i) {
    for (const auto& [name, t] : state) {
      if (name == params_[i].first + ".exp_avg") m_[i].copy_(t);
      if (name == params_[i].first + ".exp_avg_sq") v_[i].copy_(t);
      if (name == params_[i].first + ".master" && masters_[i].defined()) masters_[i].copy_(t);
    }
  }
}

}  // namespace chorus::tensor::optim
