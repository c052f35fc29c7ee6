// chorus::parallel — the global gradient norm of a model spread over a mesh, and clipping by it.
#pragma once

#include <functional>
#include <string>

#include "chorus/communicator.h"
#include "chorus/tensor/nn.h"

namespace chorus::parallel {

// Scales the gradients of `params` (this rank's) so that the global L2 norm is at most
// max_norm (no clipping when max_norm <= 0), and returns the norm before clipping (inf/nan when
// a gradient is not finite; then nothing is scaled). The squares of the gradients `counted`
// accepts (all when unset) are summed on this rank, then over `group` (collective): with DDP,
// every data-parallel replica holds the same reduced gradients, so `group` is the model-parallel
// group mesh.mp() (tp x pp) and `counted` takes a replicated tensor-parallel parameter on one tp
// rank only (is_tensor_parallel_slice). Every element of the model is then counted once. The
// norm is tensor::optim's exact one: its bits are one process's norm of the same gradients,
// however the parameters are spread over the ranks.
double clip_grad_norm(const tensor::nn::NamedTensors& params, double max_norm, Communicator& group,
                      const std::function<bool(const std::string&)>& counted = {});

}  // namespace chorus::parallel
