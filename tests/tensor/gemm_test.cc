// Every available GEMM backend against a double-precision reference, all transposes, odd sizes;
// and the f32 kernels (fast exp/tanh, ISA clones) against their f64 versions.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "chorus/tensor/amp.h"
#include "chorus/tensor/gemm.h"
#include "chorus/tensor/ops.h"
#include "gradcheck.h"

namespace chorus::tensor {
namespace {

using testing::randn;

std::vector<double> ref_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                             const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
      c[i * n + j] = s;
    }
  return c;
}

int threads_of_this_process() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) n += e.exists();
  return n;
}

// The libraries run on the team's threads only. OpenBLAS's pthreads build starts workers of its
// own when it is loaded (one per core but one), each busy-waiting about 100 ms: on two cores
// that halved the team's GEMMs for a process's first 100 ms, the choice of kernels included. So
// once every backend has run, the process holds no thread beyond the team.
TEST(Gemm, TheLibrariesKeepNoThreadsOfTheirOwn) {
  const std::string chosen = gemm_backend();
  const Tensor a = randn({256, 256}, 1, DataType::kF32), b = randn({256, 256}, 2, DataType::kF32);
  for (const auto& be : gemm_backends()) {
    if (!be.available) continue;
    set_gemm_backend(be.name);
    (void)matmul(a, b);
  }
  set_gemm_backend(chosen);
  EXPECT_LE(threads_of_this_process(), num_threads())
      << "a library keeps threads beyond the tensor team of " << num_threads();
}

TEST(Gemm, EveryBackendMatchesReference) {
  const std::string chosen = gemm_backend();
  for (const auto& be : gemm_backends()) {
    if (!be.available) {
      std::printf("  gemm backend %s unavailable: %s\n", be.name.c_str(), be.note.c_str());
      continue;
    }
    std::printf("  gemm backend %s (%s): %.1f GFLOP/s%s\n", be.name.c_str(), be.note.c_str(),
                be.measured_gflops, be.name == chosen ? "  <- chosen" : "");
    set_gemm_backend(be.name);
    // The last three cross the blocked kernel's row block (120), K block (1024) and 12 x 32
    // tile edges in every direction.
    for (auto [m, n, k] : {std::tuple{1, 1, 1},
                           {7, 33, 5},
                           {65, 31, 129},
                           {130, 97, 3},
                           {263, 70, 531},
                           {25, 161, 257},
                           {40, 45, 2100}}) {
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        Tensor a = randn({m * k}, 100 + t, DataType::kF32),
               b = randn({k * n}, 200 + t, DataType::kF32);
        Tensor c = randn({m * n}, 300, DataType::kF32);  // beta = 0.5 keeps part of it
        const auto c0 = c.to_vector();
        gemm(ta, tb, m, n, k, 1.5f, a.data<float>(), ta ? m : k, b.data<float>(), tb ? k : n, 0.5f,
             c.data<float>(), n);
        const auto ref = ref_gemm(ta, tb, m, n, k, a.to_vector(), b.to_vector());
        const auto got = c.to_vector();
        for (size_t i = 0; i < ref.size(); ++i)
          ASSERT_NEAR(got[i], 1.5 * ref[i] + 0.5 * c0[i], 1e-4 * std::sqrt(double(k)) * 4)
              << be.name << " m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb;
      }
    }
  }
  set_gemm_backend(chosen);
  // f64 (builtin) to full precision.
  Tensor a = randn({37 * 19}, 1), b = randn({19 * 23}, 2),
         c = Tensor::zeros({37 * 23}, DataType::kF64);
  gemm(false, true, 37, 23, 19, 1.0, a.data<double>(), 19, b.data<double>(), 19, 0.0,
       c.data<double>(), 23);
  const auto ref = ref_gemm(false, true, 37, 23, 19, a.to_vector(), b.to_vector());
  const auto got = c.to_vector();
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(got[i], ref[i], 1e-12);
}

// f32 ops track their f64 versions: the fast exp (~2 ulp) and f32 accumulation bound errors
// at a few 1e-6 relative.
TEST(Gemm, Float32OpsTrackFloat64) {
  auto check = [](const char* name, const std::function<Tensor(const std::vector<Tensor>&)>& op,
                  const std::vector<Tensor>& in64, double tol) {
    std::vector<Tensor> in32;
    for (const Tensor& t : in64) in32.push_back(is_floating(t.dtype()) ? t.to(DataType::kF32) : t);
    const auto r64 = op(in64).to_vector(), r32 = op(in32).to_vector();
    ASSERT_EQ(r64.size(), r32.size());
    double worst = 0;
    for (size_t i = 0; i < r64.size(); ++i)
      worst = std::max(worst, std::abs(r64[i] - r32[i]) / (1.0 + std::abs(r64[i])));
    EXPECT_LT(worst, tol) << name;
  };
  check(
      "gelu", [](auto& in) { return gelu(in[0]); }, {randn({4097}, 1, DataType::kF64, 3.0)}, 1e-6);
  check(
      "softmax", [](auto& in) { return softmax(in[0]); },
      {randn({33, 257}, 2, DataType::kF64, 4.0)}, 1e-6);
  check(
      "layernorm", [](auto& in) { return layernorm(in[0], in[1], in[2]); },
      {randn({65, 255}, 3), randn({255}, 4), randn({255}, 5)}, 1e-5);
  check(
      "attention", [](auto& in) { return causal_attention(in[0], in[1], in[2]); },
      {randn({2, 3, 37, 16}, 6), randn({2, 3, 37, 16}, 7), randn({2, 3, 37, 16}, 8)}, 1e-5);
  check(
      "cross_entropy", [](auto& in) { return cross_entropy(in[0], in[1]); },
      {randn({64, 301}, 9, DataType::kF64, 3.0), testing::randint({64}, 301, 10)}, 1e-6);
  check(
      "linear", [](auto& in) { return linear(in[0], in[1], in[2]); },
      {randn({67, 129}, 11), randn({45, 129}, 12), randn({45}, 13)}, 1e-5);
  check(
      "scale_rows", [](auto& in) { return scale_rows(in[0], in[1]); },
      {randn({33, 65}, 14), randn({33}, 15)}, 1e-6);
  check(
      "logsumexp", [](auto& in) { return logsumexp(in[0]); },
      {randn({33, 65}, 16, DataType::kF64, 4.0)}, 1e-6);
  const Tensor rows = testing::randint({40}, 21, 17);
  check(
      "index_add_rows",
      [&](auto& in) { return index_add_rows(in[0], rows, gather_rows(in[1], rows)); },
      {randn({21, 9}, 18), randn({21, 9}, 19)}, 1e-6);
}

TEST(Gemm, AutocastRoundsOperandsAndResult) {
  // (rows, in, out): the last shapes cross the 12 x 32 tiles, the 120-row blocks and odd K.
  for (auto [n, k, m] : {std::tuple{9, 33, 17}, {131, 70, 45}, {25, 257, 97}}) {
    Tensor x = randn({n, k}, 20, DataType::kF32), w = randn({m, k}, 21, DataType::kF32);
    for (DataType lowp : {DataType::kBF16, DataType::kF16}) {
      Tensor out;
      {
        AutocastGuard ac(lowp);
        out = linear(x, w);
      }
      EXPECT_EQ(out.dtype(), DataType::kF32);
      // Reference: f64 product of the rounded operands, rounded to the 16-bit type.
      Tensor ref = linear(x.to(lowp).to(DataType::kF64), w.to(lowp).to(DataType::kF64))
                       .to(DataType::kF32)
                       .to(lowp);
      const auto got = out.to_vector(), want = ref.to_vector();
      int mismatches = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        // At most one 16-bit ulp apart (summation order can flip a rounding).
        const double ulp = std::abs(want[i]) * (lowp == DataType::kBF16 ? 1.0 / 128 : 1.0 / 1024);
        ASSERT_LE(std::abs(got[i] - want[i]), ulp + 1e-6)
            << i << " shape " << n << "x" << k << "x" << m;
        mismatches += got[i] != want[i];
      }
      EXPECT_LT(mismatches, static_cast<int>(got.size() / 10));
    }
  }
}

// Autocast backward: the gradients equal f64 GEMMs of the rounded operands (dy rounded too),
// each product rounded, within a 16-bit ulp.
TEST(Gemm, AutocastBackward) {
  const int64_t n = 37, k = 66, m = 29;
  Tensor x = randn({n, k}, 22, DataType::kF32), w = randn({m, k}, 23, DataType::kF32);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  {
    AutocastGuard ac(DataType::kBF16);
    sum(linear(x, w)).backward();
  }
  // dy = 1: dx = 1 @ W (rounded), dW = 1^T @ x (rounded).
  Tensor ones = Tensor::ones({n, m}, DataType::kF64);
  const auto dx_ref = matmul(ones, w.to(DataType::kBF16).to(DataType::kF64))
                          .to(DataType::kF32)
                          .to(DataType::kBF16)
                          .to_vector();
  const auto dw_ref =
      matmul(ones.transpose(0, 1).contiguous(), x.to(DataType::kBF16).to(DataType::kF64))
          .to(DataType::kF32)
          .to(DataType::kBF16)
          .to_vector();
  const auto dx = x.grad().to_vector(), dw = w.grad().to_vector();
  for (size_t i = 0; i < dx.size(); ++i)
    ASSERT_NEAR(dx[i], dx_ref[i], std::abs(dx_ref[i]) / 128 + 1e-6);
  for (size_t i = 0; i < dw.size(); ++i)
    ASSERT_NEAR(dw[i], dw_ref[i], std::abs(dw_ref[i]) / 128 + 1e-6);
}

}  // namespace
}  // namespace chorus::tensor
