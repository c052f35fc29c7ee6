// The tape: accumulation, no_grad, grad-ready hooks, graph shapes.
#include <gtest/gtest.h>

#include <cstring>

#include "chorus/tensor/autograd.h"
#include "chorus/tensor/ops.h"
#include "gradcheck.h"

namespace chorus::tensor {
namespace {

using testing::randn;

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor w = randn({3, 4}, 1);
  w.set_requires_grad(true);
  Tensor x = randn({5, 4}, 2);
  sum(linear(x, w)).backward();
  const auto g1 = w.grad().to_vector();
  sum(linear(x, w)).backward();
  const auto g2 = w.grad().to_vector();
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_NEAR(g2[i], 2 * g1[i], 1e-12);
  // d/dW sum(x W^T) = column sums of x, broadcast over rows of W.
  const auto xv = x.to_vector();
  for (int64_t j = 0; j < 4; ++j) {
    double col = 0;
    for (int64_t n = 0; n < 5; ++n) col += xv[n * 4 + j];
    EXPECT_NEAR(g1[j], col, 1e-12);
  }
}

// A leaf used twice in a graph gets two pieces per backward; over two backwards its gradient is
// ga + gb, each backward's whole gradient added in one step (not ((ga + p1) + p2)), whether the
// gradient starts undefined or bound to zeros. The grouping data parallelism reproduces.
TEST(Autograd, ABackwardAddsItsWholeGradientToALeafInOneStep) {
  Tensor w = randn({8, 64}, 11);
  w.set_requires_grad(true);
  const Tensor xa = randn({16, 64}, 12), xb = randn({16, 64}, 13), xc = randn({16, 64}, 14);
  auto loss = [&](const Tensor& x, const Tensor& y) {
    return add(sum(linear(x, w)), sum(gelu(linear(y, w))));
  };
  loss(xa, xb).backward();
  const Tensor ga = w.grad().clone();
  w.set_grad({});
  loss(xb, xc).backward();
  const Tensor gb = w.grad().clone();
  Tensor expected = ga.clone();
  accumulate_grad(expected, gb);
  w.set_grad({});
  loss(xa, xb).backward();
  loss(xb, xc).backward();
  EXPECT_EQ(std::memcmp(w.grad().data_ptr(), expected.data_ptr(), expected.nbytes()), 0);
  // Bound to zeros (a data-parallel bucket): 0 + ga + gb.
  w.bind_grad(Tensor::zeros({8, 64}, w.dtype()));
  Tensor from_zero = Tensor::zeros({8, 64}, w.dtype());
  accumulate_grad(from_zero, ga);
  accumulate_grad(from_zero, gb);
  loss(xa, xb).backward();
  loss(xb, xc).backward();
  EXPECT_EQ(std::memcmp(w.grad().data_ptr(), from_zero.data_ptr(), from_zero.nbytes()), 0);
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor w = randn({4}, 3);
  w.set_requires_grad(true);
  Tensor y;
  {
    NoGradGuard ng;
    EXPECT_FALSE(grad_enabled());
    y = gelu(w);
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_THROW(y.backward(), InvalidArgument);
  Tensor z = gelu(w);
  EXPECT_TRUE(z.requires_grad());
  EXPECT_NE(z.grad_fn(), nullptr);
  EXPECT_TRUE(w.is_leaf());
  EXPECT_FALSE(z.is_leaf());
  // detach cuts the graph but shares storage.
  Tensor d = z.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.storage(), z.storage());
}

TEST(Autograd, DiamondGraphSumsBothPaths) {
  // y = a*a + 3a: dy/da = 2a + 3.
  Tensor a = randn({7}, 4);
  a.set_requires_grad(true);
  Tensor y = sum(add(mul(a, a), scale(a, 3.0)));
  y.backward();
  auto av = a.to_vector(), g = a.grad().to_vector();
  for (size_t i = 0; i < av.size(); ++i) EXPECT_NEAR(g[i], 2 * av[i] + 3, 1e-12);
}

TEST(Autograd, SecondBackwardThroughFreedGraphThrows) {
  Tensor a = randn({3}, 5);
  a.set_requires_grad(true);
  Tensor y = sum(gelu(a));
  y.backward();
  EXPECT_THROW(y.backward(), InvalidArgument);
}

TEST(Autograd, GradReadyHooksFireOnceWithTheFinalGradient) {
  // w is used by two ops (like a tied embedding / lm_head); its hook must fire after both
  // contributions, exactly once per backward. b is used once, late in the forward, so its
  // hook fires before w's.
  Tensor w = randn({6, 5}, 6), b = randn({6}, 7);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor idx = testing::randint({4}, 6, 8);
  std::vector<std::string> order;
  std::vector<double> w_grad_in_hook;
  w.register_grad_ready_hook([&](Tensor& g) {
    order.push_back("w");
    w_grad_in_hook = g.to_vector();
  });
  b.register_grad_ready_hook([&](Tensor&) { order.push_back("b"); });
  Tensor h = embedding(idx, w);     // (4, 5)
  Tensor logits = linear(h, w, b);  // (4, 6), w again
  Tensor loss = cross_entropy(logits, idx);
  loss.backward();
  ASSERT_EQ(order, (std::vector<std::string>{"b", "w"}));
  EXPECT_EQ(w_grad_in_hook, w.grad().to_vector());
  // A second backward fires them again.
  cross_entropy(linear(embedding(idx, w), w, b), idx).backward();
  EXPECT_EQ(order.size(), 4u);
  // Suppressed hooks stay silent.
  {
    HookSuppressGuard quiet;
    cross_entropy(linear(embedding(idx, w), w, b), idx).backward();
  }
  EXPECT_EQ(order.size(), 4u);
}

TEST(Autograd, BackwardSeedsNonScalars) {
  Tensor a = randn({2, 3}, 9);
  a.set_requires_grad(true);
  Tensor y = scale(a, 2.0);
  EXPECT_THROW(y.backward(), InvalidArgument);
  y.backward(Tensor::ones({2, 3}, DataType::kF64));
  for (double g : a.grad().to_vector()) EXPECT_EQ(g, 2.0);
}

// with_side_loss: the output's backward gives x the output's gradient and the side loss a seed
// of 1, in the same backward: the gradients of (y . g) + side, with g the seed of y.
TEST(Autograd, ASideLossIsSeededInTheOutputsBackward) {
  Tensor w = Tensor::from_vector(std::vector<double>{2.0, 3.0}, {2});
  Tensor v = Tensor::from_vector(std::vector<double>{5.0}, {1});
  w.set_requires_grad(true);
  v.set_requires_grad(true);
  const Tensor y = scale(w, 4.0);
  const Tensor side = sum(mul(v, v));  // d/dv = 2 v = 10
  const Tensor out = with_side_loss(y, side);
  EXPECT_EQ(out.to_vector(), y.to_vector());
  out.backward(Tensor::from_vector(std::vector<double>{1.0, -1.0}, {2}));
  EXPECT_EQ(w.grad().to_vector(), (std::vector<double>{4.0, -4.0}));
  EXPECT_EQ(v.grad().to_vector(), (std::vector<double>{10.0}));
  EXPECT_THROW(with_side_loss(y, w), InvalidArgument);  // not a scalar
}

}  // namespace
}  // namespace chorus::tensor
