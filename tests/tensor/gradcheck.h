// Finite-difference gradient checking for tensor ops (ggml test-backend-ops style).
//
// The checked scalar is L = sum(f(inputs) * R) with R a fixed random tensor, so every output
// element gets a distinct upstream gradient. Analytic dL/dx comes from backward(); numeric from
// central differences (L(x + h) - L(x - h)) / 2h in f64, h = 1e-6: truncation error O(h^2 f''')
// ~1e-12, rounding error O(eps_f64 |L| / h) ~1e-10, so atol 1e-6 + rtol 1e-5 has wide margin.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "chorus/tensor/autograd.h"
#include "chorus/tensor/ops.h"
#include "chorus/tensor/random.h"

namespace chorus::tensor::testing {

inline Tensor randn(Shape shape, uint64_t stream, DataType dtype = DataType::kF64,
                    double std = 1.0) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  fill_normal_(t, {42, stream}, 0.0, std);
  return t;
}

inline Tensor randint(Shape shape, int64_t high, uint64_t stream, DataType dtype = DataType::kI64) {
  Tensor u = Tensor::empty(shape, DataType::kF64);
  fill_uniform_(u, {43, stream}, 0.0, static_cast<double>(high));
  std::vector<int64_t> v;
  for (double x : u.to_vector()) v.push_back(static_cast<int64_t>(x));
  return Tensor::from_vector(std::span<const int64_t>(v), std::move(shape), dtype);
}

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks the gradients of every input of op that requires grad.
inline void gradcheck(const std::string& name, const OpFn& op, std::vector<Tensor> inputs,
                      double atol = 1e-6, double rtol = 1e-5) {
  SCOPED_TRACE(name);
  Tensor probe;
  {
    NoGradGuard ng;
    probe = op(inputs);
  }
  const Tensor r = randn(probe.shape(), 999);
  auto loss_of = [&](const std::vector<Tensor>& in) { return sum(mul(op(in), r)); };

  for (Tensor& t : inputs)
    if (t.requires_grad()) t.set_grad({});
  loss_of(inputs).backward();

  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor& x = inputs[i];
    if (!x.requires_grad()) continue;
    ASSERT_TRUE(x.grad().defined()) << "input " << i << " got no gradient";
    const std::vector<double> analytic = x.grad().to_vector();
    ASSERT_EQ(x.dtype(), DataType::kF64);
    ASSERT_TRUE(x.is_contiguous());
    double* p = x.data<double>();
    const double h = 1e-6;
    int failures = 0;
    for (int64_t j = 0; j < x.numel() && failures < 5; ++j) {
      const double saved = p[j];
      NoGradGuard ng;
      p[j] = saved + h;
      const double lp = loss_of(inputs).item();
      p[j] = saved - h;
      const double lm = loss_of(inputs).item();
      p[j] = saved;
      const double numeric = (lp - lm) / (2 * h);
      const double tol = atol + rtol * std::abs(numeric);
      if (std::abs(numeric - analytic[j]) > tol) {
        ++failures;
        ADD_FAILURE() << "input " << i << " element " << j << ": analytic " << analytic[j]
                      << " numeric " << numeric;
      }
    }
  }
}

}  // namespace chorus::tensor::testing
