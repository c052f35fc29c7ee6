#include "common/pre_backward.h"

#include "chorus/tensor/autograd.h"
#include "chorus/tensor/ops.h"

namespace chorus::parallel {

tensor::Tensor with_pre_backward(const tensor::Tensor& x, std::function<void()> before,
                                 const char* name) {
  return tensor::record(
      name, x.detach(), {x},
      [before = std::move(before)](const tensor::Tensor& dy, tensor::GradSink& sink) {
        before();
        bool fresh = false;
        tensor::Tensor dx = sink.grad_for_write(0, &fresh);
        if (!dx.defined()) return;
        if (fresh)
          dx.copy_(dy);
        else
          dx.copy_(tensor::add(dx, dy));
      });
}

}  // namespace chorus::parallel
