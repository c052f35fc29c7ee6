// Internal: what every wrapper over replicas does first — check that every rank holds the same
// parameters, and start them from rank 0's values.
#pragma once

#include <string_view>

#include "chorus/communicator.h"
#include "chorus/tensor/nn.h"

namespace chorus::parallel {

// Collective over `group`: every rank must hold parameters with the same names, dtypes and
// shapes in the same order. When they differ, every rank throws the same InvalidArgument,
// naming `who`, the first parameter that differs and the ranks it differs between.
void check_same_parameters(Communicator& group, const tensor::nn::NamedTensors& params,
                           std::string_view who);

// Collective over `group`: rank 0's parameter values on every rank (flat broadcasts of up to
// `chunk_bytes` at a time).
void broadcast_parameters(Communicator& group, const tensor::nn::NamedTensors& params,
                          size_t chunk_bytes = size_t{16} << 20);

}  // namespace chorus::parallel
