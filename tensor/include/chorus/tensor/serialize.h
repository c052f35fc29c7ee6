// chorus::tensor — checkpoint files: named tensors, bit-exact.
//
// Format (little-endian): "CHRSTNSR", u32 version (1), u64 count, then per tensor
//   u32 name length, name bytes, u8 dtype (chorus::DataType value), u32 ndim, i64 shape[ndim],
//   u64 byte count, raw row-major bytes.
// Written to "<path>.tmp" then renamed, so a crash never leaves a half-written checkpoint.
// Tensors on a GPU are saved from a host copy; loaded tensors are on the CPU (load_state_dict
// copies them onto the parameters' devices).
#pragma once

#include <string>

#include "chorus/tensor/nn.h"

namespace chorus::tensor {

void save_tensors(const std::string& path, const nn::NamedTensors& tensors);
nn::NamedTensors load_tensors(const std::string& path);

}  // namespace chorus::tensor
