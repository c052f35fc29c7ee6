// Internal: the defined gradients of some parameters, grouped by device in first-seen order (one
// reduction per device: on a GPU, one wait for the host instead of one per tensor).
#pragma once

#include <vector>

#include "chorus/tensor/tensor.h"

namespace chorus::tensor::optim {

// InvalidArgument naming `op` for a gradient that is not f32 or f64.
std::vector<std::vector<Tensor>> gradients_by_device(const std::vector<Tensor>& params,
                                                     const char* op);

}  // namespace chorus::tensor::optim
