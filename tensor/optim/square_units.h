// Internal: the fixed-point grid of the exact gradient norm (optim.h, "Gradient norm"), one
// definition for every backend that adds squares on it (cpu/square_units.cc, cuda/square_units.cu).
//
// With M the largest |g| (2^e <= M < 2^(e+1)), every square is below 2^(2e+2); it is scaled by
// 2^s, s = kUnitBits - (2e+2), so that it lies below 2^kUnitBits, and truncated to an integer (a
// "unit"). Units are summed in 128 bits, leaving 126 - kUnitBits = 48 bits of headroom (2^48
// elements). The truncation loses less than one unit per element: at most n * 2^-(78-2) of the
// largest square, below double's rounding of the result for any n < 2^24 and far below any use
// of a norm beyond. Integer sums do not depend on their order: any backend, thread count or
// split of the elements gives the same bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/host_device.h"

namespace chorus::tensor::optim {

using U128 = unsigned __int128;
constexpr int kUnitBits = 78;

// s, the grid's exponent, for the largest |g| (finite and > 0).
inline int unit_scale_exponent(float max_abs) { return kUnitBits - (2 * std::ilogb(max_abs) + 2); }

// One element's square on the grid (scale = 2^s) as its two 64-bit halves, each truncated to an
// integer. A float's square is exact in double (a double's is rounded, the same way wherever the
// element sits); the scale is a power of two, and hi * 2^64 is exact, so a fused multiply-add in
// the subtraction gives the same bits as two operations.
struct SquareHalves {
  uint64_t hi, lo;
};
CHORUS_HOST_DEVICE inline SquareHalves square_halves(double v, double scale) {
  const double u = v * v * scale;
  const auto hi = static_cast<uint64_t>(u * 0x1p-64);
  const auto lo = static_cast<uint64_t>(u - static_cast<double>(hi) * 0x1p64);
  return {hi, lo};
}

}  // namespace chorus::tensor::optim
