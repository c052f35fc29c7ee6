// SGD with optional momentum and L2 weight decay:  g' = g + wd p;  b = mu b + g';  p -= lr b
#include "chorus/tensor/optim.h"
#include "cpu/dispatch.h"
#include "cpu/elementwise.h"

namespace chorus::tensor::optim {

SGD::SGD(nn::NamedTensors params, SGDOptions options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  if (options_.momentum != 0)
    for (size_t i = 0; i < params_.size(); ++i)
      momentum_.push_back(Tensor::zeros(master(i).shape(), master(i).dtype()));
}

void SGD::step() {
  ++step_;
  for_each_param([&](size_t i) {
    Tensor g = grad_of(i);
    if (!g.defined()) return;
    Tensor& p = master(i);
    dispatch_float(p.dtype(), "sgd", [&](auto tag) {
      using T = decltype(tag);
      const int64_t n = p.numel();
      T* pp = p.data<T>();
      Tensor d = g;
      if (options_.weight_decay != 0) {
        d = g.clone();
        cpu::axpy(d.data<T>(), T(options_.weight_decay), pp, n);
      }
      if (options_.momentum != 0) {
        T* b = momentum_[i].data<T>();
        const T* dp = d.data<T>();
        const T mu = T(options_.momentum);
        for (int64_t j = 0; j < n; ++j) b[j] = mu * b[j] + dp[j];
        cpu::axpy(pp, T(-lr_), b, n);
      } else {
        cpu::axpy(pp, T(-lr_), d.data<T>(), n);
      }
    });
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
