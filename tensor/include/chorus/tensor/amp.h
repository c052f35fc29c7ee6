// chorus::tensor — mixed precision: autocast for the matmuls and dynamic loss scaling.
//
// Under AutocastGuard(kBF16 or kF16), linear() and matmul() on f32 operands round both operands
// to the 16-bit type, multiply with f32 accumulation, and round the product to the 16-bit type
// (stored in an f32 tensor, so the element-wise ops after it run in f32 as usual). Backward does
// the same to the incoming gradient. Parameters stay f32: they are the master weights the
// optimizer updates, and the 16-bit copies are made per step.
//
// fp16's narrow range needs loss scaling: GradScaler multiplies the loss before backward,
// divides gradients after, skips the step and halves the scale when any gradient is inf/nan,
// and doubles the scale after `growth_interval` clean steps.
#pragma once

#include <cstdint>
#include <vector>

#include "chorus/tensor/tensor.h"
#include "chorus/types.h"

namespace chorus::tensor {

namespace optim {
class Optimizer;
}

// kF32 when autocast is off in this thread.
DataType autocast_dtype();

class AutocastGuard {
 public:
  // dtype: kBF16 or kF16 (or kF32 to turn autocast off inside an autocast region).
  explicit AutocastGuard(DataType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DataType prev_;
};

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 200;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  // loss * scale (differentiable); call backward() on the result.
  Tensor scale(const Tensor& loss) const;
  // Unscales the optimizer's gradients; steps when all are finite. Returns whether it stepped.
  bool step(optim::Optimizer& optimizer);
  // The same over several optimizers that make up one model (all step or none): unscales every
  // one's gradients and steps them all when all are finite and `overflow_elsewhere` is false.
  // A distributed run passes whether any rank saw an inf/nan (a global gradient norm that is not
  // finite), so that every rank, and every optimizer on it, skips the same steps.
  bool step(const std::vector<optim::Optimizer*>& optimizers, bool overflow_elsewhere = false);
  // Adjusts the scale after step(): backoff on an overflow, growth after a run of clean steps.
  void update();
  double get_scale() const { return scale_; }
  int64_t skipped_steps() const { return skipped_; }

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t clean_steps_ = 0;
  int64_t skipped_ = 0;
  bool last_overflow_ = false;
};

}  // namespace chorus::tensor
