// The parallel tests' comparison of a strategy's tensors with the whole model's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "chorus/tensor/tensor.h"

namespace chorus::testing {

// max |a - b| over the elements, a and b any layout (their sizes must agree).
inline double max_diff(const tensor::Tensor& a, const tensor::Tensor& b) {
  const std::vector<double> va = a.to_vector(), vb = b.to_vector();
  EXPECT_EQ(va.size(), vb.size());
  double d = 0;
  for (size_t i = 0; i < std::min(va.size(), vb.size()); ++i)
    d = std::max(d, std::abs(va[i] - vb[i]));
  return d;
}

}  // namespace chorus::testing
