// SGD with optional momentum and L2 weight decay:  g' = g + wd p;  b = mu b + g';  p -= lr b
#include "backend/backend.h"
#include "chorus/tensor/optim.h"

namespace chorus::tensor::optim {

SGD::SGD(nn::NamedTensors params, SGDOptions options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  if (options_.momentum != 0)
    for (size_t i = 0; i < params_.size(); ++i) momentum_.push_back(Tensor::zeros_like(master(i)));
}

void SGD::step() {
  ++step_;
  for_each_param([&](size_t i) {
    Tensor g = grad_of(i);
    if (!g.defined()) return;
    Tensor& p = master(i);
    CHORUS_ARG_CHECK(p.dtype() == DataType::kF32 || p.dtype() == DataType::kF64, "sgd: dtype ",
                     to_string(p.dtype()), " not supported (f32 or f64; cast first)");
    const Tensor buf = options_.momentum != 0 ? momentum_[i] : Tensor();
    CHORUS_ARG_CHECK(g.device() == p.device() && (!buf.defined() || buf.device() == p.device()),
                     "sgd: '", params_[i].first, "' is on ", to_string(p.device()),
                     " but its gradient or state is elsewhere (build the optimizer after moving "
                     "the model)");
    backend_for(p.device()).sgd(p, g, buf, lr_, options_.momentum, options_.weight_decay);
    write_back(i);
  });
}

nn::NamedTensors SGD::state_dict() const {
  nn::NamedTensors s = Optimizer::state_dict();
  for (size_t i = 0; i < momentum_.size(); ++i)
    s.emplace_back(params_[i].first + ".momentum_buffer", momentum_[i]);
  for (size_t i = 0; i < params_.size(); ++i)
    if (masters_[i].defined()) s.emplace_back(params_[i].first + ".master", masters_[i]);
  return s;
}

void SGD::load_state_dict(const nn::NamedTensors& state) {
  Optimizer::load_state_dict(state);
  for (size_t i = 0; i < params_.size(); ++i)
    for (const auto& [name, t] : state) {
      if (i < momentum_.size() && name == params_[i].first + ".momentum_buffer")
        momentum_[i].copy_(t);
      if (name == params_[i].first + ".master" && masters_[i].defined()) masters_[i].copy_(t);
    }
}

}  // namespace chorus::tensor::optim
