// Internal: the exact gradient norm (tensor/optim.h, "Gradient norm") of gradients spread over
// ranks, shared by clip_grad_norm (DDP, pipelines, tensor parallelism) and ZeroOptimizer.
#pragma once

#include <vector>

#include "chorus/communicator.h"
#include "chorus/tensor/tensor.h"

namespace chorus::parallel {

// The L2 norm of every rank's `grads` together: each pass of the exact norm completed over the
// communicators of `groups` in turn (collective over each). Its bits equal one process's norm of
// the same elements, however they are split among the ranks.
double global_norm(const std::vector<tensor::Tensor>& grads,
                   const std::vector<Communicator*>& groups);

}  // namespace chorus::parallel
