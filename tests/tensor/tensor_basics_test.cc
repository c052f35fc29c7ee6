// Tensor storage, views, copies, casts and the counter-based RNG.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "chorus/tensor/ops.h"
#include "chorus/tensor/random.h"
#include "chorus/tensor/tensor.h"

namespace chorus::tensor {
namespace {

Tensor arange(int64_t n, Shape shape, DataType dtype = DataType::kF32) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i);
  return Tensor::from_vector(std::span<const double>(v), std::move(shape), dtype);
}

TEST(TensorBasics, FactoriesAndMetadata) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.dtype(), DataType::kF32);
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
  Tensor f = Tensor::full({5}, 2.5, DataType::kF64);
  for (double v : f.to_vector()) EXPECT_EQ(v, 2.5);
  // A device this process cannot use is refused (device_test.cc: with the reason).
  EXPECT_THROW(Tensor::empty({2}, DataType::kF32, Device{DeviceType::kCUDA, 64}), InvalidArgument);
  EXPECT_FALSE(Tensor().defined());
}

TEST(TensorBasics, ViewsShareStorage) {
  Tensor t = arange(24, {2, 3, 4});
  Tensor tr = t.transpose(0, 2);  // (4, 3, 2)
  EXPECT_EQ(tr.shape(), (Shape{4, 3, 2}));
  EXPECT_FALSE(tr.is_contiguous());
  EXPECT_EQ(tr.storage(), t.storage());
  auto v = tr.to_vector();
  // tr[i][j][k] = t[k][j][i] = 12k + 4j + i
  EXPECT_EQ(v[0 * 6 + 1 * 2 + 1], 12 * 1 + 4 * 1 + 0);
  EXPECT_EQ(v[3 * 6 + 2 * 2 + 1], 12 * 1 + 4 * 2 + 3);

  Tensor nr = t.narrow(2, 1, 2);  // (2, 3, 2) columns 1..2
  EXPECT_EQ(nr.to_vector(), (std::vector<double>{1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22}));
  Tensor sel = t.select(1, 2);  // (2, 4)
  EXPECT_EQ(sel.to_vector(), (std::vector<double>{8, 9, 10, 11, 20, 21, 22, 23}));
  Tensor vw = t.view({6, -1});
  EXPECT_EQ(vw.shape(), (Shape{6, 4}));
  EXPECT_THROW(tr.view({24}), InvalidArgument);
  Tensor rs = tr.reshape({24});
  EXPECT_TRUE(rs.is_contiguous());
  EXPECT_EQ(rs.to_vector(), tr.to_vector());
  // Writes through a view land in the base.
  sel.fill_(-1);
  EXPECT_EQ(t.to_vector()[8], -1);
  EXPECT_EQ(t.to_vector()[23], -1);
  EXPECT_EQ(t.to_vector()[7], 7);
}

TEST(TensorBasics, ContiguousCloneAndCasts) {
  Tensor t = arange(12, {3, 4});
  Tensor c = t.transpose(0, 1).contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.shape(), (Shape{4, 3}));
  EXPECT_EQ(c.to_vector(), (std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  Tensor cl = t.clone();
  EXPECT_NE(cl.storage(), t.storage());
  // Casts round to nearest even and agree with the core scalar conversions.
  std::vector<double> vals{1.0, 1.0 + 1.0 / 512, 3.14159, -65504.0, 70000.0, 1e-8, -0.0};
  Tensor x = Tensor::from_vector(std::span<const double>(vals), {7}, DataType::kF32);
  auto bf = x.to(DataType::kBF16).to_vector();
  auto hf = x.to(DataType::kF16).to_vector();
  for (size_t i = 0; i < vals.size(); ++i) {
    const float f = static_cast<float>(vals[i]);
    EXPECT_EQ(bf[i], bf16_to_float(float_to_bf16(f))) << i;
    EXPECT_EQ(hf[i], half_to_float(float_to_half(f))) << i;
  }
  EXPECT_TRUE(std::isinf(hf[4]));
  Tensor idx = x.to(DataType::kI64);
  EXPECT_EQ(idx.to_vector()[2], 3);
  // Strided copy_ converts too.
  Tensor dst = Tensor::zeros({4, 3}, DataType::kF64);
  dst.copy_(t.transpose(0, 1));
  EXPECT_EQ(dst.to_vector(), c.to_vector());
}

TEST(TensorBasics, PhiloxKnownAnswer) {
  // Random123 known-answer vectors for philox4x32_10.
  auto r = philox4x32({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(r, (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  r = philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(r, (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  r = philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u});
  EXPECT_EQ(r, (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(TensorBasics, RandomIsKeyedByIndexNotLayout) {
  const RngKey key{1234, stream_id("h.0.attn.c_attn.weight")};
  Tensor whole = Tensor::empty({64, 48});
  fill_normal_(whole, key, 0.0, 0.02);
  // Two row shards drawn separately (each asking for its global indices) equal the whole.
  Tensor top = Tensor::empty({32, 48}), bottom = Tensor::empty({32, 48});
  fill_normal_(top, key, 0.0, 0.02, 0);
  fill_normal_(bottom, key, 0.0, 0.02, 32 * 48);
  auto w = whole.to_vector(), a = top.to_vector(), b = bottom.to_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(w[i], a[i]);
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(w[a.size() + i], b[i]);
  // Statistics of a larger draw.
  Tensor big = Tensor::empty({100000}, DataType::kF64);
  fill_normal_(big, {7, 1}, 0.0, 1.0);
  double s = 0, s2 = 0;
  for (double v : big.to_vector()) s += v, s2 += v * v;
  EXPECT_NEAR(s / 1e5, 0.0, 0.02);
  EXPECT_NEAR(s2 / 1e5, 1.0, 0.02);
  fill_uniform_(big, {7, 2}, -1.0, 1.0);
  double lo = 1, hi = -1, su = 0;
  for (double v : big.to_vector()) lo = std::min(lo, v), hi = std::max(hi, v), su += v;
  EXPECT_GE(lo, -1.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_NEAR(su / 1e5, 0.0, 0.01);
  // Different streams differ.
  EXPECT_NE(uniform_at({1, 1}, 0), uniform_at({1, 2}, 0));
  EXPECT_NE(stream_id("a"), stream_id("b"));
}

TEST(TensorBasics, MemoryStatsTrackPeak) {
  reset_peak_memory();
  const auto before = memory_stats();
  {
    Tensor big = Tensor::empty({1 << 20});
    EXPECT_GE(memory_stats().current_bytes, before.current_bytes + (4 << 20));
  }
  EXPECT_EQ(memory_stats().current_bytes, before.current_bytes);
  EXPECT_GE(memory_stats().peak_bytes, before.current_bytes + (4 << 20));
}

// Products over an empty inner dimension are sums of nothing: zeros (plus the bias), with the
// output shaped by the leading dims, not by numel / K.
TEST(TensorBasics, ProductsOverAnEmptyInnerDimensionAreZero) {
  const Tensor x = Tensor::empty({3, 0}), w = Tensor::empty({5, 0});
  const Tensor b = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5}, {5});
  const Tensor y = linear(x, w, b);
  ASSERT_EQ(y.shape(), (Shape{3, 5}));
  const std::vector<double> v = y.to_vector();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], double(i % 5 + 1));
  const Tensor p = matmul(Tensor::empty({2, 4, 0}), Tensor::empty({0, 6}));
  ASSERT_EQ(p.shape(), (Shape{2, 4, 6}));
  for (double e : p.to_vector()) EXPECT_EQ(e, 0.0);
}

}  // namespace
}  // namespace chorus::tensor
