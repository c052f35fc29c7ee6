// The autocast bf16 GEMM's ways and their selection: every method (our AVX512-BF16 kernel,
// oneDNN's bf16 matmul, the f32 GEMM on widened operands) against an f64 reference in every
// shape class; the mode strings that record and force a choice; the selection rule.
#include <gtest/gtest.h>

#include <cmath>

#include "chorus/error.h"
#include "chorus/tensor/amp.h"
#include "chorus/tensor/gemm.h"
#include "chorus/tensor/ops.h"
#include "gemm/backend.h"
#include "gradcheck.h"

namespace chorus::tensor {
namespace {

using testing::randn;

// Forces `mode`; false (with the reason printed) where the method is unavailable here.
bool force(const std::string& mode) {
  try {
    set_bf16_gemm_mode(mode);
    return true;
  } catch (const InvalidArgument& e) {
    std::printf("  bf16 gemm %s unavailable: %s\n", mode.c_str(), e.what());
    return false;
  }
}

// Within one bf16 ulp of the rounded f64 reference, and mostly equal.
void expect_close(const Tensor& got_t, const Tensor& want_t, const std::string& what) {
  const auto got = got_t.to_vector(), want = want_t.to_vector();
  ASSERT_EQ(got.size(), want.size()) << what;
  int mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::abs(got[i] - want[i]), std::abs(want[i]) / 128 + 1e-6) << what << " at " << i;
    mismatches += got[i] != want[i];
  }
  EXPECT_LT(mismatches, static_cast<int>(got.size() / 10) + 1) << what;
}

Tensor rounded64(const Tensor& x) { return x.to(DataType::kBF16).to(DataType::kF64); }
Tensor round16(const Tensor& x) { return x.to(DataType::kF32).to(DataType::kBF16); }

// linear's forward (nt), dx (nn) and dW (tn), in small and large classes, for each method.
TEST(Bf16Selection, EveryMethodMatchesReferenceInEveryClass) {
  const std::string before = bf16_gemm_mode();
  int tried = 0;
  for (const char* mode : {"native", "dnnl", "f32"}) {
    if (!force(mode)) continue;
    ++tried;
    // (rows, in, out): 9x33x17 is small in every product; 160x257x129 is large in every one
    // (> 2^21 multiply-adds) and odd in every dimension.
    for (auto [n, k, m] : {std::tuple{9, 33, 17}, {160, 257, 129}}) {
      const std::string what = std::string(mode) + " " + std::to_string(n) + "x" +
                               std::to_string(k) + "x" + std::to_string(m);
      Tensor x = randn({n, k}, 30, DataType::kF32), w = randn({m, k}, 31, DataType::kF32);
      Tensor dy = randn({n, m}, 32, DataType::kF32);
      x.set_requires_grad(true);
      w.set_requires_grad(true);
      Tensor out;
      {
        AutocastGuard ac(DataType::kBF16);
        out = linear(x, w);
        sum(mul(out, dy)).backward();
      }
      expect_close(out, round16(linear(rounded64(x), rounded64(w))), what + " forward");
      // dx = dy W, dW = dy^T x, each from rounded operands and rounded.
      const Tensor dy64 = rounded64(dy);
      expect_close(x.grad(), round16(matmul(dy64, rounded64(w))), what + " dx");
      expect_close(w.grad(), round16(matmul(dy64.transpose(0, 1).contiguous(), rounded64(x))),
                   what + " dW");
    }
  }
  EXPECT_GE(tried, 1);  // f32 is always available
  set_bf16_gemm_mode(before);
}

TEST(Bf16Selection, ModeStringsRecordAndForceTheChoice) {
  const std::string before = bf16_gemm_mode();
  ASSERT_TRUE(force("f32"));
  EXPECT_EQ(bf16_gemm_mode(), "f32");
  // Per class: the named classes as given, the rest measured; the string names every class.
  set_bf16_gemm_mode("nt.large=f32,nn.small=f32");
  const std::string mixed = bf16_gemm_mode();
  if (mixed != "f32") {
    EXPECT_NE(mixed.find("nt.large=f32"), std::string::npos) << mixed;
    EXPECT_NE(mixed.find("nn.small=f32"), std::string::npos) << mixed;
  }
  // A recorded string forces the same plan again (what rank 0 broadcasts to the others).
  set_bf16_gemm_mode(mixed);
  EXPECT_EQ(bf16_gemm_mode(), mixed);
  // Bad input names what is wrong and changes nothing.
  auto message = [](const std::string& mode) {
    try {
      set_bf16_gemm_mode(mode);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("fast").find("not auto, native, dnnl or f32"), std::string::npos);
  EXPECT_NE(message("nx.large=f32").find("unknown shape class 'nx.large'"), std::string::npos);
  EXPECT_NE(message("nt.large").find("'nt.large'"), std::string::npos);
  EXPECT_EQ(bf16_gemm_mode(), mixed);
  set_bf16_gemm_mode(before);
  EXPECT_EQ(bf16_gemm_mode(), before);
}

TEST(Bf16Selection, ShapeClasses) {
  using gemm_impl::shape_class;
  // Pattern (nn, nt, tn, tt) times 2, plus 1 when large (>= 2^21 multiply-adds).
  EXPECT_EQ(shape_class(false, false, 128, 128, 64), 0);
  EXPECT_EQ(shape_class(false, true, 128, 128, 128), 3);
  EXPECT_EQ(shape_class(true, false, 1024, 768, 256), 5);
  EXPECT_EQ(shape_class(true, true, 1, 1, 1), 6);
  EXPECT_EQ(shape_class(false, false, 0, 5, 5), 0);
}

TEST(Bf16Selection, TheRuleKeepsTheFirstWithinTheMarginOfTheFastest) {
  using gemm_impl::first_within_margin;
  EXPECT_EQ(first_within_margin({1.0, 0.5, 2.0}), 1u);
  EXPECT_EQ(first_within_margin({1.01, 1.0, 0.995}), 0u);  // within 3%: the preferred one
  EXPECT_EQ(first_within_margin({1.05, 1.0}), 1u);         // 5% slower: not within noise
  EXPECT_EQ(first_within_margin({-1, 2.0, 1.0}), 2u);      // -1: not a candidate
  EXPECT_EQ(first_within_margin({-1, -1}), 2u);            // none
}

}  // namespace
}  // namespace chorus::tensor
