// chorus::tensor — activation checkpointing.
//
// checkpoint(fn, x, params) returns fn(x) but keeps only x: fn runs under no_grad, so none of
// its intermediate activations are saved. The recorded node's backward re-runs fn(x) with
// grad enabled (same autocast mode; dropout keys are explicit, so the same masks), back-
// propagates through the recomputed graph, and hands x its gradient. Parameters used inside fn
// get their gradients accumulated during that nested backward; they are listed as the node's
// inputs so the outer backward knows the node is one of their consumers, and their grad-ready
// hooks fire from the outer backward after the node has run (the nested one is silenced).
#pragma once

#include <functional>
#include <vector>

#include "chorus/tensor/tensor.h"

namespace chorus::tensor {

using CheckpointFn = std::function<Tensor(const Tensor&)>;

// fn must be a pure function of x and params (and explicit RNG keys).
Tensor checkpoint(const CheckpointFn& fn, const Tensor& x, const std::vector<Tensor>& params);

}  // namespace chorus::tensor
