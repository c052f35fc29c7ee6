// Dynamic loss scaling for fp16 (see amp.h).
#include <cmath>

#include "backend/backend.h"
#include "chorus/tensor/amp.h"
#include "chorus/tensor/ops.h"
#include "chorus/tensor/optim.h"
#include "optim/grad_groups.h"

namespace chorus::tensor {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  CHORUS_ARG_CHECK(options.init_scale > 0 && options.growth_factor > 1 &&
                       options.backoff_factor > 0 && options.backoff_factor < 1 &&
                       options.growth_interval > 0,
                   "GradScaler: invalid options");
}

Tensor GradScaler::scale(const Tensor& loss) const { return tensor::scale(loss, scale_); }

bool GradScaler::step(optim::Optimizer& optimizer) { return step({&optimizer}); }

bool GradScaler::step(const std::vector<optim::Optimizer*>& optimizers, bool overflow_elsewhere) {
  const double inv = 1.0 / scale_;
  bool finite = !overflow_elsewhere;
  for (optim::Optimizer* optimizer : optimizers) {
    optimizer->wait_grads();  // a data-parallel gate: every gradient reduced first
    std::vector<Tensor> params;
    for (const auto& [name, p] : optimizer->params()) params.push_back(p);
    // Unscale in place, then test: one sum of squares over each device's gradients finds any
    // inf or nan.
    for (const auto& grads : optim::gradients_by_device(params, "GradScaler")) {
      Backend& be = backend_for(grads.front().device());
      for (const Tensor& g : grads) be.scale(g, g, inv);
      if (!std::isfinite(be.sum_squares(grads))) finite = false;
    }
  }
  last_overflow_ = !finite;
  if (finite) {
    for (optim::Optimizer* optimizer : optimizers) optimizer->step();
  } else {
    ++skipped_;
  }
  return finite;
}

void GradScaler::update() {
  if (last_overflow_) {
    scale_ *= options_.backoff_factor;
    clean_steps_ = 0;
  } else if (++clean_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    clean_steps_ = 0;
  }
}

}  // namespace chorus::tensor
