// Internal: the CPU's passes of the exact gradient norm (optim/square_units.h), over the tensor
// thread team; any thread count gives the same result.
#pragma once

#include <cstdint>

#include "optim/square_units.h"

namespace chorus::tensor::cpu {

// The largest |x[i]| as a float; +inf when some element is NaN or infinite.
template <class T>
float max_abs(const T* x, int64_t n);

// The sum of x's squares on the grid 2^scale_exponent, in units.
template <class T>
optim::U128 square_units(const T* x, int64_t n, int scale_exponent);

}  // namespace chorus::tensor::cpu
