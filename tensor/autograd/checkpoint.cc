#include "chorus/tensor/checkpoint.h"

#include "chorus/tensor/amp.h"
#include "chorus/tensor/autograd.h"
#include "runtime/transfer.h"

namespace chorus::tensor {

Tensor checkpoint(const CheckpointFn& fn, const Tensor& x, const std::vector<Tensor>& params) {
  bool any = x.requires_grad();
  for (const Tensor& p : params) any = any || p.requires_grad();
  if (!grad_enabled() || !any) return fn(x);

  Tensor out;
  {
    NoGradGuard no_grad;  // nothing inside fn is saved
    out = fn(x);
  }
  const DataType autocast = autocast_dtype();
  const Tensor x_saved = x.detach();
  const bool x_needs_grad = x.requires_grad();
  std::vector<Tensor> inputs{x};
  inputs.insert(inputs.end(), params.begin(), params.end());
  return record("checkpoint", out, inputs,
                [fn, x_saved, x_needs_grad, autocast](const Tensor& dy, GradSink& g) {
                  // Recompute with the forward's autocast mode, on a fresh leaf standing in for x.
                  EnableGradGuard enable;
                  AutocastGuard same_precision(autocast);
                  Tensor xin = x_saved.detach();
                  if (x_needs_grad) xin.set_requires_grad(true);
                  Tensor y = fn(xin);
                  {
                    HookSuppressGuard quiet;  // the outer backward fires the parameters' hooks
                    y.backward(dy);           // parameter gradients accumulate into their grad()
                  }
                  if (Tensor dx = g.grad(0); dx.defined() && xin.grad().defined())
                    copy_tensor(dx, xin.grad(), /*accumulate=*/true);
                });
}

}  // namespace chorus::tensor
