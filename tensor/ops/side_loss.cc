// with_side_loss: x passes through; backward seeds a scalar loss computed beside it.
#include "cpu/strided.h"
#include "ops/op_util.h"

namespace chorus::tensor {

Tensor with_side_loss(const Tensor& x, const Tensor& loss) {
  check_defined(x, "with_side_loss", "input");
  check_defined(loss, "with_side_loss", "loss");
  CHORUS_ARG_CHECK(loss.numel() == 1, "with_side_loss: the loss must be a scalar, got ",
                   to_string(loss.shape()));
  Tensor out = x.detach();
  const Tensor one = Tensor::ones(loss.shape(), loss.dtype(), loss.device());
  // backward: dx += dy; dloss += 1
  return record("with_side_loss", out, {x, loss}, [one](const Tensor& dy, GradSink& g) {
    bool fresh = false;
    if (Tensor dx = g.grad_for_write(0, &fresh); dx.defined()) strided_copy(dx, dy, !fresh);
    if (Tensor dl = g.grad_for_write(1, &fresh); dl.defined()) strided_copy(dl, one, !fresh);
  });
}

}  // namespace chorus::tensor
