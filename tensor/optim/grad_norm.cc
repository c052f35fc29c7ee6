// The exact gradient norm (optim.h, "Gradient norm"): squares added as integers on one
// fixed-point grid, so that no grouping of the elements (threads, shards, pipeline stages) can
// change a bit of the sum.
//
// Grid: with M the largest |g| (2^e <= M < 2^(e+1)), every square is below 2^(2e+2); it is
// scaled by 2^s, s = kUnitBits - (2e+2), so that it lies below 2^kUnitBits, and truncated to an
// integer (a "unit"). Units are summed in 128 bits, leaving 126 - kUnitBits = 48 bits of headroom
// (2^48 elements). The truncation loses less than one unit per element: at most n * 2^-(78-2)
// of the largest square, below double's rounding of the result for any n < 2^24 and far below
// any use of a norm beyond.
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "chorus/tensor/optim.h"
#include "cpu/dispatch.h"
#include "cpu/elementwise.h"
#include "cpu/simd.h"

namespace chorus::tensor::optim {
namespace {

using U128 = unsigned __int128;
constexpr int kUnitBits = 78;
constexpr int64_t kBlock = 1 << 14;

template <class F>
void for_each_value(const Tensor& g, F&& f) {
  CHORUS_ARG_CHECK(g.is_contiguous(), "gradient norm: the gradient must be contiguous");
  // The exact norm has no device kernel yet: a GPU's gradients are refused, never read.
  CHORUS_ARG_CHECK(g.device().is_cpu(), "gradient norm: gradients on ", to_string(g.device()),
                   " are not supported yet (the exact norm runs on the CPU)");
  dispatch_any(g.dtype(), "gradient norm", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16>) {
      f(g.data<T>(), g.numel());
    } else {
      throw InvalidArgument("gradient norm: " + std::string(to_string(g.dtype())) +
                            " is not a floating-point type");
    }
  });
}

template <class T>
double as_double(T x) {
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<double>(x);
  else
    return static_cast<double>(static_cast<float>(x));
}

int scale_of(float max_abs) { return kUnitBits - (2 * std::ilogb(max_abs) + 2); }

}  // namespace

float grad_max_abs(const Tensor& g) {
  float out = 0;
  for_each_value(g, [&](const auto* x, int64_t n) {
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    std::vector<float> part(static_cast<size_t>(blocks), 0.f);
    parallel_for(blocks, kBlock, [&](int64_t b0, int64_t b1, int) {
      for (int64_t b = b0; b < b1; ++b) {
        float m = 0;
        for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
          const auto v = static_cast<float>(std::fabs(as_double(x[i])));
          m = v > m || std::isnan(v) ? (std::isnan(v) ? std::numeric_limits<float>::infinity() : v)
                                     : m;
        }
        part[static_cast<size_t>(b)] = m;
      }
    });
    for (float m : part) out = std::max(out, m);
  });
  return out;
}

void add_squares(const Tensor& g, float max_abs, SquareUnits& units) {
  if (!(max_abs > 0) || !std::isfinite(max_abs)) return;  // nothing to add, or no finite grid
  const double scale = std::ldexp(1.0, scale_of(max_abs));
  U128 total = 0;
  for_each_value(g, [&](const auto* x, int64_t n) {
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    std::vector<U128> part(static_cast<size_t>(blocks), 0);
    parallel_for(blocks, 8 * kBlock, [&](int64_t b0, int64_t b1, int) {
      for (int64_t b = b0; b < b1; ++b) {
        U128 acc = 0;
        for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
          const double v = as_double(x[i]);
          // A float's square is exact in double (a double's is rounded, the same way wherever
          // the element sits); the scale is a power of two.
          const double u = v * v * scale;
          // Split at 2^64 (both halves exact), each truncated to an integer.
          const auto hi = static_cast<uint64_t>(u * 0x1p-64);
          const auto lo = static_cast<uint64_t>(u - static_cast<double>(hi) * 0x1p64);
          acc += (static_cast<U128>(hi) << 64) + lo;
        }
        part[static_cast<size_t>(b)] = acc;
      }
    });
    for (U128 p : part) total += p;
  });
  // Into 32-bit limbs (each sum of limbs over ranks stays far inside int64).
  for (size_t k = 0; k < units.size(); ++k) {
    units[k] += static_cast<int64_t>(static_cast<uint32_t>(total >> (32 * k)));
  }
}

double norm_of(const SquareUnits& units, float max_abs) {
  if (std::isnan(max_abs) || std::isinf(max_abs)) return std::numeric_limits<double>::infinity();
  if (!(max_abs > 0)) return 0;
  U128 total = 0;
  for (size_t k = 0; k < units.size(); ++k)
    total += static_cast<U128>(static_cast<uint64_t>(units[k])) << (32 * k);
  return std::sqrt(std::ldexp(static_cast<double>(total), -scale_of(max_abs)));
}

void scale_grad(const Tensor& g, double factor) {
  for_each_value(g, [&](auto* x, int64_t n) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(x)>>;
    if constexpr (std::is_floating_point_v<T>) {
      cpu::scale_forward(x, x, T(factor), n);
    } else {
      for (int64_t i = 0; i < n; ++i)
        x[i] = T(static_cast<float>(x[i]) * static_cast<float>(factor));
    }
  });
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  float max_abs = 0;
  for (const Tensor& p : params)
    if (p.grad().defined()) max_abs = std::max(max_abs, grad_max_abs(p.grad()));
  SquareUnits units{};
  for (const Tensor& p : params)
    if (p.grad().defined()) add_squares(p.grad(), max_abs, units);
  const double norm = norm_of(units, max_abs);
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  const double factor = max_norm / (norm + 1e-6);
  for (const Tensor& p : params)
    if (p.grad().defined()) scale_grad(p.grad(), factor);
  return norm;
}

double clip_grad_norm(Optimizer& optimizer, double max_norm) {
  optimizer.wait_grads();
  std::vector<Tensor> params;
  for (const auto& [name, p] : optimizer.params()) params.push_back(p);
  return clip_grad_norm(params, max_norm);
}

}  // namespace chorus::tensor::optim
