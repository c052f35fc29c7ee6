// chorus::tensor::optim — optimizers over f32 master weights, gradient clipping, LR schedule.
//
// Optimizers update parameters in place outside autograd. f32 parameters are their own master
// weights; a 16-bit parameter gets an f32 master copy in the optimizer, updated in f32 and
// rounded back into the parameter after each step. The state lives on each parameter's device,
// so build the optimizer after moving the model (Module::to(device)); a parameter found on
// another device than its state is refused, naming both.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "chorus/tensor/nn.h"
#include "chorus/tensor/tensor.h"

namespace chorus::tensor::optim {

class Optimizer {
 public:
  explicit Optimizer(nn::NamedTensors params, double lr);
  virtual ~Optimizer() = default;
  // One update from the parameters' current gradients (parameters without one are skipped).
  virtual void step() = 0;
  // Resets the gradients for the next accumulation (Tensor::zero_grad).
  void zero_grad();

  // The gate a data-parallel wrapper puts before each parameter's update: step() visits the
  // parameters in `order` (indices into params(); empty = all, in order) and calls wait(i)
  // before it reads parameter i's gradient, so the update of one bucket runs while later ones
  // are still being reduced. A default gate (none) reads every gradient as it is.
  struct GradGate {
    std::vector<size_t> order;
    std::function<void(size_t index)> wait;
  };
  void set_grad_gate(GradGate gate);
  // Passes the gate for every parameter: afterwards every gradient is complete (GradScaler and
  // clip_grad_norm(Optimizer&, ...) call it before they read gradients).
  void wait_grads();
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  int64_t step_count() const { return step_; }
  const nn::NamedTensors& params() const { return params_; }

  // Optimizer state by name ("<param>.exp_avg", ..., and "step"), for checkpoints.
  virtual nn::NamedTensors state_dict() const;
  virtual void load_state_dict(const nn::NamedTensors& state);

 protected:
  // The f32 tensor to update for parameter i (the parameter itself or its master copy), and
  // the write-back of a master copy into a 16-bit parameter.
  Tensor& master(size_t i);
  void write_back(size_t i);
  // The gradient of parameter i as f32/f64 contiguous (converted when the parameter is 16-bit).
  Tensor grad_of(size_t i) const;
  // Calls visit(i) for every parameter in the gate's order, after the gate's wait(i).
  void for_each_param(const std::function<void(size_t)>& visit);

  nn::NamedTensors params_;
  std::vector<Tensor> masters_;  // undefined where the parameter is its own master
  double lr_;
  int64_t step_ = 0;
  GradGate gate_;
};

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;  // L2 added to the gradient
};

class SGD : public Optimizer {
 public:
  SGD(nn::NamedTensors params, SGDOptions options);
  void step() override;
  nn::NamedTensors state_dict() const override;
  void load_state_dict(const nn::NamedTensors& state) override;

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_;
};

struct AdamWOptions {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // GPT-2 convention: decay only matrices (dim >= 2), never biases or LayerNorm gains.
  bool decay_matrices_only = true;
  // When set, decides instead which parameters decay, by name and tensor (a sharded optimizer
  // holds flat slices of matrices, and asks about the matrix the slice belongs to).
  std::function<bool(const std::string& name, const Tensor& param)> decays = nullptr;
};

// Adam with decoupled weight decay (Loshchilov & Hutter) and bias correction:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p )
// CPU parameters are updated one by one as the gate passes them; a GPU's parameters in one fused
// update over all of them at the end of step().
class AdamW : public Optimizer {
 public:
  AdamW(nn::NamedTensors params, AdamWOptions options);
  void step() override;
  nn::NamedTensors state_dict() const override;
  void load_state_dict(const nn::NamedTensors& state) override;
  const AdamWOptions& options() const { return options_; }

 private:
  AdamWOptions options_;
  std::vector<Tensor> m_, v_;
};

// Scales all gradients so that their global L2 norm is at most max_norm; returns the norm
// before clipping (inf when a gradient is not finite, in which case nothing is scaled).
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
// The same over an optimizer's parameters, after its gate (Optimizer::wait_grads).
double clip_grad_norm(Optimizer& optimizer, double max_norm);

// Gradient norm. The norm is exact in the sense that matters to sharded training: its bits do
// not depend on how the elements are grouped, so one process and any split of the same
// gradients over threads, shards (ZeRO) or stages (pipelines) get the same norm, and clip alike.
// The squares are added as integers on one fixed-point grid set by the largest |g| (grad_norm.cc:
// the truncation costs less than 2^-76 of the largest square per element). In three passes, each
// of which a sharded caller completes over its ranks before the next:
//   1. max_abs = the largest grad_max_abs() of every piece (all-reduce kMax);
//   2. add_squares() of every piece with that max_abs into one SquareUnits (all-reduce kSum of
//      the limbs, as kI64);
//   3. norm_of(units, max_abs); scale_grad() each piece by max_norm / (norm + 1e-6) to clip.
// grad_max_abs is +inf when a gradient holds a NaN or an infinity; norm_of then returns inf.
using SquareUnits = std::array<int64_t, 4>;  // a 128-bit sum as 32-bit limbs, low first
float grad_max_abs(const Tensor& grad);
void add_squares(const Tensor& grad, float max_abs, SquareUnits& units);
double norm_of(const SquareUnits& units, float max_abs);
void scale_grad(const Tensor& grad, double factor);

// Linear warmup from 0 to max_lr over warmup steps, then cosine decay to min_lr at total.
struct CosineSchedule {
  double max_lr = 3e-4;
  double min_lr = 3e-5;
  int64_t warmup = 100;
  int64_t total = 1000;
  double at(int64_t step) const;
};

}  // namespace chorus::tensor::optim
