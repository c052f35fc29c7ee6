// Internal: where a tensor this rank holds sits inside the full (logical) tensor it is part of.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chorus/tensor/nn.h"

namespace chorus::parallel {

// Local elements [local, local + length) of a tensor are the full tensor's row-major elements
// [logical, logical + length). Local elements no run covers are not part of the full tensor (a
// vocabulary-parallel table's padding).
struct Run {
  int64_t local = 0, logical = 0, length = 0;
};
using Region = std::vector<Run>;

Region whole_region(int64_t numel);
// The part of `r` covering local elements [begin, end), renumbered from `begin` = 0.
Region sub_region(const Region& r, int64_t begin, int64_t end);
// Where parameter `name` of `model` (a tensor-parallel slice or a whole parameter) lies in the
// full parameter; its full shape into `full_shape`.
Region param_region(tensor::nn::Module& model, const std::string& name, const tensor::Tensor& local,
                    tensor::Shape* full_shape);

}  // namespace chorus::parallel
