#include "chorus/parallel/grad_norm.h"

#include <cmath>

#include "chorus/tensor/autograd.h"
#include "chorus/tensor/ops.h"

namespace chorus::parallel {

double clip_grad_norm(const tensor::nn::NamedTensors& params, double max_norm, Communicator& group,
                      const std::function<bool(const std::string&)>& counted) {
  double sq = 0;
  for (const auto& [name, p] : params) {
    const tensor::Tensor& g = p.grad();
    if (!g.defined() || (counted && !counted(name))) continue;
    for (double v : g.to_vector()) sq += v * v;
  }
  double total = 0;
  group.all_reduce(&sq, &total, 1, DataType::kF64, ReduceOp::kSum);
  const double norm = std::sqrt(total);
  if (max_norm <= 0 || !std::isfinite(norm) || norm <= max_norm) return norm;
  const double factor = max_norm / (norm + 1e-6);
  tensor::NoGradGuard no_grad;
  for (const auto& [name, p] : params) {
    tensor::Tensor g = p.grad();
    if (g.defined()) g.copy_(tensor::scale(g, factor));
  }
  return norm;
}

}  // namespace chorus::parallel
