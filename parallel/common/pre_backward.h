// Internal: an identity in autograd whose backward first calls a function (a ZeRO-3 unit
// gathers its parameters there; the tracer marks where a block's backward starts).
#pragma once

#include <functional>

#include "chorus/tensor/tensor.h"

namespace chorus::parallel {

// y = x; when the gradient reaches y, `before` runs, then dx += dy. `name` names the node.
tensor::Tensor with_pre_backward(const tensor::Tensor& x, std::function<void()> before,
                                 const char* name);

}  // namespace chorus::parallel
