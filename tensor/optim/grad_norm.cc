// The exact gradient norm (optim.h, "Gradient norm"): squares added as integers on one
// fixed-point grid (optim/square_units.h), so that no grouping of the elements (threads, shards,
// pipeline stages, devices) can change a bit of the sum. The passes run on the gradient's device
// (Backend::max_abs, Backend::square_units); only their scalar results come to the host.
#include <cmath>
#include <limits>
#include <vector>

#include "backend/backend.h"
#include "chorus/tensor/optim.h"
#include "cpu/dispatch.h"
#include "optim/square_units.h"

namespace chorus::tensor::optim {
namespace {

Backend& backend_of(const Tensor& g) {
  CHORUS_ARG_CHECK(g.is_contiguous(), "gradient norm: the gradient must be contiguous");
  return backend_for(g.device());
}

}  // namespace

float grad_max_abs(const Tensor& g) { return backend_of(g).max_abs(g); }

void add_squares(const Tensor& g, float max_abs, SquareUnits& units) {
  if (!(max_abs > 0) || !std::isfinite(max_abs)) return;  // nothing to add, or no finite grid
  const U128 total = backend_of(g).square_units(g, unit_scale_exponent(max_abs));
  // Into 32-bit limbs (each sum of limbs over ranks stays far inside int64).
  for (size_t k = 0; k < units.size(); ++k)
    units[k] += static_cast<int64_t>(static_cast<uint32_t>(total >> (32 * k)));
}

double norm_of(const SquareUnits& units, float max_abs) {
  if (std::isnan(max_abs) || std::isinf(max_abs)) return std::numeric_limits<double>::infinity();
  if (!(max_abs > 0)) return 0;
  U128 total = 0;
  for (size_t k = 0; k < units.size(); ++k)
    total += static_cast<U128>(static_cast<uint64_t>(units[k])) << (32 * k);
  return std::sqrt(std::ldexp(static_cast<double>(total), -unit_scale_exponent(max_abs)));
}

void scale_grad(const Tensor& g, double factor) {
  Backend& be = backend_of(g);
  if (g.dtype() == DataType::kF32 || g.dtype() == DataType::kF64 || !g.device().is_cpu()) {
    be.scale(g, g, factor);  // a 16-bit gradient on a GPU is refused by the kernel, by name
    return;
  }
  dispatch_float_any(g.dtype(), "gradient norm", [&](auto tag) {  // bf16 or f16 here
    using T = decltype(tag);
    T* x = g.data<T>();
    for (int64_t i = 0, n = g.numel(); i < n; ++i)
      x[i] = T(static_cast<float>(x[i]) * static_cast<float>(factor));
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
