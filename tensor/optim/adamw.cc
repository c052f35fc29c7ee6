#include <cmath>

#include "chorus/tensor/optim.h"
#include "cpu/adamw.h"
#include "cpu/dispatch.h"

namespace chorus::tensor::optim {

AdamW::AdamW(nn::NamedTensors params, AdamWOptions options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  for (size_t i = 0; i < params_.size(); ++i) {
    m_.push_back(Tensor::zeros(master(i).shape(), master(i).dtype()));
    v_.push_back(Tensor::zeros(master(i).shape(), master(i).dtype()));
  }
}

void AdamW::step() {
  ++step_;
  const double c1 = 1.0 - std::pow(options_.beta1, static_cast<double>(step_));
  const double c2 = 1.0 - std::pow(options_.beta2, static_cast<double>(step_));
  for_each_param([&](size_t i) {
    const Tensor g = grad_of(i);
    if (!g.defined()) return;
    Tensor& p = master(i);
    const bool decay = options_.decays ? options_.decays(params_[i].first, params_[i].second)
                                       : !options_.decay_matrices_only || p.dim() >= 2;
    dispatch_float(p.dtype(), "adamw", [&](auto tag) {
      using T = decltype(tag);
      cpu::adamw_update(p.data<T>(), g.data<T>(), m_[i].data<T>(), v_[i].data<T>(), p.numel(),
                        static_cast<float>(lr_), static_cast<float>(options_.beta1),
                        static_cast<float>(options_.beta2), static_cast<float>(c1),
                        static_cast<float>(c2), static_cast<float>(options_.eps),
                        decay ? static_cast<float>(options_.weight_decay) : 0.0f);
    });
    write_back(i);
  });
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
