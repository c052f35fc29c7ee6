// Optimizer base: master weights, gradient access, zero_grad, the generic state dict.
#include <cmath>

#include "chorus/tensor/autograd.h"
#include "chorus/tensor/optim.h"
#include "runtime/transfer.h"

namespace chorus::tensor::optim {

Optimizer::Optimizer(nn::NamedTensors params, double lr) : params_(std::move(params)), lr_(lr) {
  masters_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    CHORUS_ARG_CHECK(is_floating(p.dtype()), "optimizer: parameter '", params_[i].first, "' is ",
                     to_string(p.dtype()));
    CHORUS_ARG_CHECK(p.is_contiguous(), "optimizer: parameter '", params_[i].first,
                     "' is not contiguous");
    if (p.dtype() == DataType::kBF16 || p.dtype() == DataType::kF16)
      masters_[i] = p.to(DataType::kF32).detach();
  }
}

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) p.zero_grad();
}

void Optimizer::set_grad_gate(GradGate gate) {
  for (size_t i : gate.order)
    CHORUS_ARG_CHECK(i < params_.size(), "set_grad_gate: index ", i, " of ", params_.size(),
                     " parameters");
  gate_ = std::move(gate);
}

void Optimizer::for_each_param(const std::function<void(size_t)>& visit) {
  const size_t n = gate_.order.empty() ? params_.size() : gate_.order.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = gate_.order.empty() ? k : gate_.order[k];
    if (gate_.wait) gate_.wait(i);
    visit(i);
  }
}

void Optimizer::wait_grads() {
  if (!gate_.wait) return;
  const size_t n = gate_.order.empty() ? params_.size() : gate_.order.size();
  for (size_t k = 0; k < n; ++k) gate_.wait(gate_.order.empty() ? k : gate_.order[k]);
}

Tensor& Optimizer::master(size_t i) {
  return masters_[i].defined() ? masters_[i] : params_[i].second;
}

void Optimizer::write_back(size_t i) {
  if (masters_[i].defined()) copy_tensor(params_[i].second, masters_[i]);
}

Tensor Optimizer::grad_of(size_t i) const {
  const Tensor& g = params_[i].second.grad();
  if (!g.defined()) return g;
  if (!masters_[i].defined()) return g;
  Tensor f = Tensor::empty(g.shape(), DataType::kF32, g.device());
  copy_tensor(f, g);
  return f;
}

nn::NamedTensors Optimizer::state_dict() const {
  return {{"step", Tensor::full({}, static_cast<double>(step_), DataType::kI64)}};
}

void Optimizer::load_state_dict(const nn::NamedTensors& state) {
  for (const auto& [name, t] : state)
    if (name == "step") step_ = static_cast<int64_t>(t.item());
}

double CosineSchedule::at(int64_t step) const {
  if (step < warmup) return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= total) return min_lr;
  const double progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
  return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(3.14159265358979323846 * progress));
}

}  // namespace chorus::tensor::optim
