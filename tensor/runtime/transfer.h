// Internal: dst (+)= src for tensors on any devices: the one copy the engine has (Tensor::copy_,
// to(device), the views' backward, gradients, optimizer master weights all come here).
//
// On one device it is that device's copy kernel. Across devices the bytes travel as one dense
// block: where one side is the CPU, the CPU converts dtypes and gathers strides (so a GPU needs
// no conversion kernel to receive or give a tensor), and the device receives or gives plain
// bytes; between two GPUs a peer copy, then the receiving device's copy kernel. A transfer
// returns once the host side may be reused.
#pragma once

#include "chorus/tensor/tensor.h"

namespace chorus::tensor {

// One shape, any strides, dtypes and devices. InvalidArgument for different shapes or a device
// this process cannot use.
void copy_tensor(const Tensor& dst, const Tensor& src, bool accumulate = false);

}  // namespace chorus::tensor
