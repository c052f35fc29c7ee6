#include "chorus/parallel/grad_norm.h"

#include <cmath>

#include "chorus/tensor/optim.h"
#include "common/global_norm.h"

namespace chorus::parallel {

double global_norm(const std::vector<tensor::Tensor>& grads,
                   const std::vector<Communicator*>& groups) {
  float max_abs = 0;
  for (const tensor::Tensor& g : grads) max_abs = std::max(max_abs, tensor::optim::grad_max_abs(g));
  for (Communicator* c : groups)
    c->all_reduce(&max_abs, &max_abs, 1, DataType::kF32, ReduceOp::kMax);
  tensor::optim::SquareUnits units{};
  for (const tensor::Tensor& g : grads) tensor::optim::add_squares(g, max_abs, units);
  for (Communicator* c : groups)
    c->all_reduce(units.data(), units.data(), units.size(), DataType::kI64, ReduceOp::kSum);
  return tensor::optim::norm_of(units, max_abs);
}

double clip_grad_norm(const tensor::nn::NamedTensors& params, double max_norm, Communicator& group,
                      const std::function<bool(const std::string&)>& counted) {
  std::vector<tensor::Tensor> grads;
  for (const auto& [name, p] : params)
    if (p.grad().defined() && (!counted || counted(name))) grads.push_back(p.grad());
  const double norm = global_norm(grads, {&group});
  if (max_norm <= 0 || !std::isfinite(norm) || norm <= max_norm) return norm;
  const double factor = max_norm / (norm + 1e-6);
  for (const auto& [name, p] : params)
    if (p.grad().defined()) tensor::optim::scale_grad(p.grad(), factor);
  return norm;
}

}  // namespace chorus::parallel
