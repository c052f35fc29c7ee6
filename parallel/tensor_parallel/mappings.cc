// The conjugate operators f and g of tensor parallelism (tensor_parallel.h), as autograd ops.
#include "chorus/parallel/tensor_parallel.h"
#include "chorus/tensor/autograd.h"
#include "common/tensor_comm.h"

namespace chorus::parallel {

using tensor::GradSink;
using tensor::Tensor;

namespace {

// dx += dy (dx fresh: assigned), outside autograd.
void accumulate(GradSink& sink, const Tensor& dy) {
  bool fresh = false;
  Tensor dx = sink.grad_for_write(0, &fresh);
  if (!dx.defined()) return;
  if (fresh)
    dx.copy_(dy);
  else
    dx.copy_(tensor::add(dx, dy.contiguous()));
}

}  // namespace

Tensor copy_to_tensor_parallel(const Tensor& x, Communicator& tp) {
  if (tp.size() == 1) return x;
  Communicator* group = &tp;
  return tensor::record("tp_copy", x.detach(), {x}, [group](const Tensor& dy, GradSink& sink) {
    Tensor sum = dy.contiguous().clone();
    TensorComm(*group, sum.device(), CommOrder::kInline)
        .all_reduce(sum.data_ptr(), sum.data_ptr(), static_cast<size_t>(sum.numel()), sum.dtype(),
                    ReduceOp::kSum);
    accumulate(sink, sum);
  });
}

Tensor reduce_from_tensor_parallel(const Tensor& x, Communicator& tp) {
  if (tp.size() == 1) return x;
  const Tensor in = x.contiguous();
  Tensor out = Tensor::empty_like(in);
  TensorComm(tp, in.device(), CommOrder::kInline)
      .all_reduce(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()), in.dtype(),
                  ReduceOp::kSum);
  return tensor::record("tp_reduce", out, {x},
                        [](const Tensor& dy, GradSink& sink) { accumulate(sink, dy); });
}

}  // namespace chorus::parallel
