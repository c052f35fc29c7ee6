// with_leaf_grad: x passes through; backward adds a given tensor to a leaf's gradient.
#include "cpu/strided.h"
#include "ops/op_util.h"

namespace chorus::tensor {

Tensor with_leaf_grad(const Tensor& x, const Tensor& leaf, const Tensor& grad) {
  check_defined(x, "with_leaf_grad", "input");
  check_defined(leaf, "with_leaf_grad", "leaf");
  CHORUS_ARG_CHECK(leaf.is_leaf() && leaf.requires_grad(),
                   "with_leaf_grad: the leaf must be a leaf that requires grad");
  CHORUS_ARG_CHECK(grad.defined() && grad.shape() == leaf.shape() && grad.dtype() == leaf.dtype(),
                   "with_leaf_grad: the gradient must have the leaf's shape and dtype");
  Tensor out = x.detach();
  // backward: dx += dy; dleaf += grad
  return record("with_leaf_grad", out, {x, leaf}, [grad](const Tensor& dy, GradSink& g) {
    bool fresh = false;
    if (Tensor dx = g.grad_for_write(0, &fresh); dx.defined()) strided_copy(dx, dy, !fresh);
    if (Tensor dl = g.grad_for_write(1, &fresh); dl.defined()) strided_copy(dl, grad, !fresh);
  });
}

}  // namespace chorus::tensor
