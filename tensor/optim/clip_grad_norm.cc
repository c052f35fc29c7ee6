#include <cmath>

#include "backend/backend.h"
#include "chorus/tensor/optim.h"
#include "optim/grad_groups.h"

namespace chorus::tensor::optim {

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  const std::vector<std::vector<Tensor>> groups = gradients_by_device(params, "clip_grad_norm");
  double sq = 0;
  for (const auto& grads : groups) sq += backend_for(grads.front().device()).sum_squares(grads);
  const double norm = std::sqrt(sq);
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  const double factor = max_norm / (norm + 1e-6);
  for (const auto& grads : groups)
    for (const Tensor& g : grads) backend_for(g.device()).scale(g, g, factor);
  return norm;
}

double clip_grad_norm(Optimizer& optimizer, double max_norm) {
  optimizer.wait_grads();
  std::vector<Tensor> params;
  for (const auto& [name, p] : optimizer.params()) params.push_back(p);
  return clip_grad_norm(params, max_norm);
}

}  // namespace chorus::tensor::optim
