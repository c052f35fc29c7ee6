#include <cmath>

#include "chorus/tensor/optim.h"
#include "cpu/dispatch.h"
#include "cpu/elementwise.h"

namespace chorus::tensor::optim {

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  double sq = 0;
  for (const Tensor& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    sq += dispatch_float(g.dtype(), "clip_grad_norm", [&](auto tag) {
      using T = decltype(tag);
      return cpu::sum_squares(g.data<T>(), g.numel());
    });
  }
  const double norm = std::sqrt(sq);
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  const double factor = max_norm / (norm + 1e-6);
  for (const Tensor& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    dispatch_float(g.dtype(), "clip_grad_norm", [&](auto tag) {
      using T = decltype(tag);
      cpu::scale_forward(g.data<T>(), g.data<T>(), T(factor), g.numel());
    });
  }
  return norm;
}

double clip_grad_norm(Optimizer& optimizer, double max_norm) {
  optimizer.wait_grads();
  std::vector<Tensor> params;
  for (const auto& [name, p] : optimizer.params()) params.push_back(p);
  return clip_grad_norm(params, max_norm);
}

}  // namespace chorus::tensor::optim
