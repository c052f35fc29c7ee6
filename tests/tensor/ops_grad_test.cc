// Every op's backward against central finite differences in f64, on odd shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "chorus/tensor/ops.h"
#include "gradcheck.h"

namespace chorus::tensor {
namespace {

using testing::gradcheck;
using testing::randint;
using testing::randn;

Tensor param(Shape s, uint64_t stream, double std = 1.0) {
  Tensor t = randn(std::move(s), stream, DataType::kF64, std);
  t.set_requires_grad(true);
  return t;
}

TEST(OpsGrad, ElementWise) {
  gradcheck("add", [](auto& in) { return add(in[0], in[1]); },
            {param({3, 5}, 1), param({3, 5}, 2)});
  gradcheck("sub", [](auto& in) { return sub(in[0], in[1]); }, {param({7}, 3), param({7}, 4)});
  gradcheck("mul", [](auto& in) { return mul(in[0], in[1]); },
            {param({2, 3, 5}, 5), param({2, 3, 5}, 6)});
  gradcheck("scale", [](auto& in) { return scale(in[0], -1.7); }, {param({9}, 7)});
  gradcheck("gelu", [](auto& in) { return gelu(in[0]); }, {param({4, 11}, 8, 2.0)});
  gradcheck("sum", [](auto& in) { return sum(in[0]); }, {param({3, 7}, 9)});
  gradcheck("mean", [](auto& in) { return mean(in[0]); }, {param({5, 3}, 10)});
  // A fixed key fixes the mask, so dropout is a differentiable function of x.
  gradcheck("dropout", [](auto& in) { return dropout(in[0], 0.3, {5, 77}); }, {param({6, 7}, 11)});
}

TEST(OpsGrad, Views) {
  gradcheck("transpose", [](auto& in) { return gelu(in[0].transpose(0, 2)); },
            {param({2, 3, 5}, 12)});
  gradcheck("narrow", [](auto& in) { return in[0].narrow(1, 1, 3); }, {param({3, 5}, 13)});
  gradcheck("select", [](auto& in) { return in[0].select(0, 2); }, {param({3, 5}, 14)});
  gradcheck("view", [](auto& in) { return in[0].view({5, -1}); }, {param({3, 5}, 15)});
  gradcheck("reshape of transpose", [](auto& in) { return in[0].transpose(0, 1).reshape({15}); },
            {param({3, 5}, 16)});
  // Two views of the same tensor: gradients from both land in one buffer.
  gradcheck("overlapping views",
            [](auto& in) { return mul(in[0].narrow(1, 0, 3), in[0].narrow(1, 2, 3)); },
            {param({4, 5}, 17)});
}

TEST(OpsGrad, MatmulAndLinear) {
  gradcheck("matmul 2d", [](auto& in) { return matmul(in[0], in[1]); },
            {param({5, 7}, 20), param({7, 3}, 21)});
  gradcheck("matmul leading dims", [](auto& in) { return matmul(in[0], in[1]); },
            {param({2, 3, 4}, 22), param({4, 5}, 23)});
  gradcheck("matmul batched", [](auto& in) { return matmul(in[0], in[1]); },
            {param({3, 2, 5}, 24), param({3, 5, 4}, 25)});
  gradcheck("linear+bias", [](auto& in) { return linear(in[0], in[1], in[2]); },
            {param({2, 3, 7}, 26), param({5, 7}, 27), param({5}, 28)});
  gradcheck("linear no bias", [](auto& in) { return linear(in[0], in[1]); },
            {param({9, 4}, 29), param({3, 4}, 30)});
  // Only the weight requires grad.
  gradcheck("linear weight only", [](auto& in) { return linear(in[0], in[1]); },
            {randn({6, 4}, 31), param({3, 4}, 32)});
}

TEST(OpsGrad, GptLayers) {
  gradcheck("embedding i64", [](auto& in) { return embedding(in[0], in[1]); },
            {randint({2, 5}, 7, 40), param({7, 3}, 41)});
  gradcheck("embedding i32", [](auto& in) { return embedding(in[0], in[1]); },
            {randint({9}, 4, 42, DataType::kI32), param({4, 5}, 43)});
  gradcheck("layernorm", [](auto& in) { return layernorm(in[0], in[1], in[2]); },
            {param({2, 3, 7}, 44, 2.0), param({7}, 45), param({7}, 46)});
  gradcheck("softmax", [](auto& in) { return softmax(in[0]); }, {param({4, 9}, 47, 2.0)});
  // Attention on strided views of one qkv tensor, as the module calls it.
  const int64_t B = 2, Tn = 5, NH = 3, HS = 4;
  gradcheck("causal_attention (qkv views)",
            [&](auto& in) {
              Tensor qkv = in[0].view({B, Tn, 3, NH, HS});
              auto part = [&](int64_t i) { return qkv.select(2, i).transpose(1, 2); };
              return causal_attention(part(0), part(1), part(2));
            },
            {param({B, Tn, 3 * NH * HS}, 48)});
  gradcheck("causal_attention_qkv", [&](auto& in) { return causal_attention_qkv(in[0], NH); },
            {param({B, Tn, 3 * NH * HS}, 48)});
  // Used twice: the second contribution accumulates into a buffer the first one assigned.
  gradcheck("causal_attention_qkv (input used twice)",
            [&](auto& in) {
              return add(causal_attention_qkv(in[0], NH), causal_attention_qkv(in[0], NH));
            },
            {param({B, Tn, 3 * NH * HS}, 47)});
  {
    // The fused form equals the composed one (forward), transposed back to (B, T, C).
    Tensor qkv = randn({B, Tn, 3 * NH * HS}, 56);
    Tensor v5 = qkv.view({B, Tn, 3, NH, HS});
    auto part = [&](int64_t i) { return v5.select(2, i).transpose(1, 2); };
    const auto composed = causal_attention(part(0), part(1), part(2))
                              .transpose(1, 2)
                              .reshape({B, Tn, NH * HS})
                              .to_vector();
    const auto fused = causal_attention_qkv(qkv, NH).to_vector();
    ASSERT_EQ(composed.size(), fused.size());
    for (size_t i = 0; i < fused.size(); ++i) EXPECT_NEAR(fused[i], composed[i], 1e-14);
  }
  gradcheck("causal_attention (dense)",
            [](auto& in) { return causal_attention(in[0], in[1], in[2]); },
            {param({1, 2, 7, 3}, 49), param({1, 2, 7, 3}, 50), param({1, 2, 7, 3}, 51)});
  gradcheck("cross_entropy i64", [](auto& in) { return cross_entropy(in[0], in[1]); },
            {param({6, 11}, 52, 3.0), randint({6}, 11, 53)});
  gradcheck("cross_entropy i32", [](auto& in) { return cross_entropy(in[0], in[1]); },
            {param({3, 5}, 54), randint({3}, 5, 55, DataType::kI32)});
}

TEST(OpsGrad, CrossEntropyAgainstReference) {
  Tensor logits = randn({4, 6}, 60, DataType::kF64, 2.0);
  Tensor t = randint({4}, 6, 61);
  const double loss = cross_entropy(logits, t).item();
  auto x = logits.to_vector();
  auto tv = t.to_vector();
  double ref = 0;
  for (int n = 0; n < 4; ++n) {
    double s = 0;
    for (int v = 0; v < 6; ++v) s += std::exp(x[n * 6 + v]);
    ref += -(x[n * 6 + static_cast<int>(tv[n])] - std::log(s));
  }
  EXPECT_NEAR(loss, ref / 4, 1e-12);
  EXPECT_THROW(cross_entropy(logits, Tensor::full({4}, 6, DataType::kI64)), InvalidArgument);
}

// The vocabulary-parallel form on two "ranks" (threads) with a barrier-based all-reduce equals
// the plain form in loss and gradient.
TEST(OpsGrad, CrossEntropyVocabParallelMatchesFull) {
  const int64_t N = 5, V = 13, split = 6;
  Tensor full_logits = randn({N, V}, 70, DataType::kF64, 2.0);
  Tensor targets = randint({N}, V, 71);
  Tensor full = full_logits.clone().detach();
  full.set_requires_grad(true);
  Tensor ref_loss = cross_entropy(full, targets);
  ref_loss.backward();

  // Shared buffers for a two-rank all-reduce.
  std::vector<Tensor> slots(2);
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0, generation = 0;
  auto all_reduce = [&](int rank, Tensor& t, bool is_max) {
    std::unique_lock lock(mu);
    slots[rank] = t;
    const int gen = generation;
    if (++arrived == 2) {
      auto a = slots[0].to_vector(), b = slots[1].to_vector();
      std::vector<double> r(a.size());
      for (size_t i = 0; i < a.size(); ++i) r[i] = is_max ? std::max(a[i], b[i]) : a[i] + b[i];
      Tensor res = Tensor::from_vector(std::span<const double>(r), t.shape(), t.dtype());
      slots[0].copy_(res);
      slots[1].copy_(res);
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen; });
    }
  };
  double losses[2];
  Tensor shards[2];
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      const int64_t start = rank == 0 ? 0 : split, len = rank == 0 ? split : V - split;
      shards[rank] = full_logits.narrow(1, start, len).contiguous().detach();
      shards[rank].set_requires_grad(true);
      VocabReductions red{[&](Tensor& m) { all_reduce(rank, m, true); },
                          [&](Tensor& s) { all_reduce(rank, s, false); }};
      Tensor loss = cross_entropy_vocab_parallel(shards[rank], targets, start, red);
      losses[rank] = loss.item();
      loss.backward();
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_NEAR(losses[0], ref_loss.item(), 1e-12);
  EXPECT_NEAR(losses[1], ref_loss.item(), 1e-12);
  auto g = full.grad().to_vector();
  auto g0 = shards[0].grad().to_vector(), g1 = shards[1].grad().to_vector();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v) {
      const double got = v < split ? g0[n * split + v] : g1[n * (V - split) + v - split];
      EXPECT_NEAR(got, g[n * V + v], 1e-12);
    }
}

TEST(OpsGrad, DropoutStatisticsAndDeterminism) {
  Tensor x = Tensor::ones({100000}, DataType::kF32);
  Tensor y = dropout(x, 0.25, {1, 2});
  auto v = y.to_vector();
  int64_t zeros = 0;
  for (double e : v) {
    if (e == 0)
      ++zeros;
    else
      EXPECT_FLOAT_EQ(e, 1.0f / 0.75f);
  }
  EXPECT_NEAR(static_cast<double>(zeros) / 1e5, 0.25, 0.01);
  EXPECT_EQ(dropout(x, 0.25, {1, 2}).to_vector(), v);
  EXPECT_NE(dropout(x, 0.25, {1, 3}).to_vector(), v);
}

}  // namespace
}  // namespace chorus::tensor
