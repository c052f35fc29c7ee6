// The mixture of experts (nn.h: MoE) and its routing ops: values against a plain f64 reference
// written here, gradients against finite differences, capacity, dropless, an idle expert, E = 1
// as the dense MLP, thread-count independence, and the GPT with experts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "chorus/tensor/gemm.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/optim.h"
#include "gradcheck.h"

namespace chorus::tensor {
namespace {

using nn::GPTConfig;
using nn::MoE;
using nn::MoEStats;
using testing::gradcheck;
using testing::randn;

Tensor param(Shape s, uint64_t stream, double std = 1.0) {
  Tensor t = randn(std::move(s), stream, DataType::kF64, std);
  t.set_requires_grad(true);
  return t;
}

Tensor indices(std::vector<int64_t> v) {
  return Tensor::from_vector(std::span<const int64_t>(v), {static_cast<int64_t>(v.size())});
}

TEST(Moe, RoutingOpsMatchFiniteDifferences) {
  // Repeated and absent rows: the scatter-add of the backward.
  const Tensor idx = indices({3, 0, 3, 4, 1});
  gradcheck("gather_rows", [&](auto& in) { return gather_rows(in[0], idx); }, {param({5, 3}, 1)});
  gradcheck("index_add_rows", [&](auto& in) { return index_add_rows(in[0], idx, in[1]); },
            {param({6, 3}, 2), param({5, 3}, 3)});
  gradcheck("scale_rows", [](auto& in) { return scale_rows(in[0], in[1]); },
            {param({4, 7}, 4), param({4}, 5)});
  gradcheck("logsumexp", [](auto& in) { return logsumexp(in[0]); }, {param({2, 3, 5}, 6, 3.0)});
}

TEST(Moe, RoutingOpsValuesAndBadInput) {
  const Tensor x =
      Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2}, DataType::kF64);
  EXPECT_EQ(gather_rows(x, indices({2, 0, 2})).to_vector(),
            (std::vector<double>{5, 6, 1, 2, 5, 6}));
  const Tensor src =
      Tensor::from_vector(std::vector<double>{10, 20, 30, 40}, {2, 2}, DataType::kF64);
  EXPECT_EQ(index_add_rows(x, indices({1, 1}), src).to_vector(),
            (std::vector<double>{1, 2, 43, 64, 5, 6}));
  EXPECT_EQ(scale_rows(x, Tensor::from_vector(std::vector<double>{2, 0, -1}, {3}, DataType::kF64))
                .to_vector(),
            (std::vector<double>{2, 4, 0, 0, -5, -6}));
  const double lse = logsumexp(x).to_vector()[1];
  EXPECT_NEAR(lse, std::log(std::exp(3.0) + std::exp(4.0)), 1e-14);
  EXPECT_THROW(gather_rows(x, indices({3})), InvalidArgument);
  EXPECT_THROW(index_add_rows(x, indices({-1, 0}), src), InvalidArgument);
  EXPECT_THROW(index_add_rows(x, indices({3, 0}), src), InvalidArgument);
  EXPECT_THROW(scale_rows(x, Tensor::from_vector(std::vector<double>{1, 2}, {2}, DataType::kF64)),
               InvalidArgument);
}

// ---- a plain f64 reference of MoE::forward ---------------------------------------------------

struct Reference {
  std::vector<double> out;  // (N, C)
  double load_balance = 0, z_loss = 0;
  std::vector<int64_t> routed, kept;
  int64_t dropped = 0;
};

std::vector<double> mlp_reference(const nn::MLP& mlp, const double* x, int64_t C) {
  const auto w1 = mlp.c_fc->weight.to_vector(), b1 = mlp.c_fc->bias.to_vector();
  const auto w2 = mlp.c_proj->weight.to_vector(), b2 = mlp.c_proj->bias.to_vector();
  const int64_t H = static_cast<int64_t>(b1.size());
  std::vector<double> h(static_cast<size_t>(H)), y(static_cast<size_t>(C));
  for (int64_t j = 0; j < H; ++j) {
    double a = b1[j];
    for (int64_t c = 0; c < C; ++c) a += w1[j * C + c] * x[c];
    h[j] = 0.5 * a * (1 + std::tanh(std::sqrt(2 / M_PI) * (a + 0.044715 * a * a * a)));
  }
  for (int64_t c = 0; c < C; ++c) {
    double a = b2[c];
    for (int64_t j = 0; j < H; ++j) a += w2[c * H + j] * h[j];
    y[c] = a;
  }
  return y;
}

Reference reference(const MoE& moe, const Tensor& x_t) {
  const auto x = x_t.to_vector();
  const auto w = moe.router->weight.to_vector();
  const int64_t E = static_cast<int64_t>(moe.experts.size()), C = x_t.size(-1);
  const int64_t N = x_t.numel() / C, K = moe.top_k;
  Reference r;
  r.out.assign(static_cast<size_t>(N * C), 0.0);
  r.routed.assign(E, 0);
  r.kept.assign(E, 0);
  std::vector<double> p(static_cast<size_t>(N * E));
  std::vector<std::vector<int64_t>> pick(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> logit(static_cast<size_t>(E));
    double mx = -INFINITY, s = 0;
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t c = 0; c < C; ++c) logit[e] += w[e * C + c] * x[n * C + c];
      mx = std::max(mx, logit[e]);
    }
    for (int64_t e = 0; e < E; ++e) s += std::exp(logit[e] - mx);
    const double lse = mx + std::log(s);
    r.z_loss += lse * lse / static_cast<double>(N);
    for (int64_t e = 0; e < E; ++e) p[n * E + e] = std::exp(logit[e] - lse);
    // Top-k by sorting (a different method from the layer's): larger first, ties to lower e.
    std::vector<int64_t> order(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return p[n * E + a] > p[n * E + b]; });
    pick[n].assign(order.begin(), order.begin() + K);
    for (int64_t e : pick[n]) ++r.routed[e];
  }
  const int64_t cap = moe.capacity_factor > 0
                          ? static_cast<int64_t>(std::ceil(moe.capacity_factor * N * K / E))
                          : N * K;
  std::vector<std::vector<bool>> keep(static_cast<size_t>(N), std::vector<bool>(K));
  for (int64_t j = 0; j < K; ++j)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t e = pick[n][j];
      keep[n][j] = r.kept[e] < cap;
      r.kept[e] += keep[n][j] ? 1 : 0;
      r.dropped += keep[n][j] ? 0 : 1;
    }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < E; ++e)  // experts in increasing order, as the layer adds them
      for (int64_t j = 0; j < K; ++j)
        if (pick[n][j] == e && keep[n][j]) {
          const auto y = mlp_reference(*moe.experts[e], x.data() + n * C, C);
          for (int64_t c = 0; c < C; ++c) r.out[n * C + c] += p[n * E + e] * y[c];
        }
  for (int64_t e = 0; e < E; ++e) {
    double P = 0;
    for (int64_t n = 0; n < N; ++n) P += p[n * E + e] / static_cast<double>(N);
    r.load_balance +=
        static_cast<double>(E) * static_cast<double>(r.routed[e]) / static_cast<double>(N * K) * P;
  }
  return r;
}

GPTConfig moe_config(int64_t experts, int64_t top_k, double capacity_factor = 0) {
  return {.layers = 1,
          .heads = 1,
          .width = 4,
          .experts = experts,
          .top_k = top_k,
          .capacity_factor = capacity_factor};
}

// An f64 MoE whose router is wide enough that the routing is far from uniform.
std::shared_ptr<MoE> make_moe(const GPTConfig& cfg, uint64_t seed) {
  auto moe = std::make_shared<MoE>(cfg);
  moe->init(seed);
  moe->to(DataType::kF64);
  NoGradGuard ng;
  fill_normal_(moe->router->weight, {seed, 7}, 0.0, 1.0);
  return moe;
}

void expect_matches_reference(const MoE& moe, const Tensor& x, int64_t expect_dropped = -1) {
  MoEStats stats;
  const Tensor y = moe.forward(x, &stats);
  const Reference r = reference(moe, x);
  ASSERT_EQ(y.shape(), x.shape());
  const auto got = y.to_vector();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], r.out[i], 1e-12) << "element " << i;
  EXPECT_NEAR(stats.load_balance.item(), r.load_balance, 1e-12);
  EXPECT_NEAR(stats.z_loss.item(), r.z_loss, 1e-12);
  EXPECT_EQ(stats.routed, r.routed);
  EXPECT_EQ(stats.kept, r.kept);
  EXPECT_EQ(stats.dropped, r.dropped);
  if (expect_dropped >= 0) {
    EXPECT_EQ(stats.dropped, expect_dropped);
  }
}

TEST(Moe, MatchesF64ReferenceTop1AndTop2) {
  for (int64_t k : {1, 2}) {
    SCOPED_TRACE(k);
    auto moe = make_moe(moe_config(3, k), 11);
    expect_matches_reference(*moe, randn({2, 5, 4}, 12), 0);
  }
}

TEST(Moe, CapacityDropsTheLateAssignments) {
  // 10 tokens, 3 experts: capacity ceil(0.5 * 10 * k / 3) = 2 (k = 1) or 4 (k = 2).
  for (int64_t k : {1, 2}) {
    SCOPED_TRACE(k);
    auto moe = make_moe(moe_config(3, k, 0.5), 13);
    MoEStats stats;
    const Tensor x = randn({10, 4}, 14);
    moe->forward(x, &stats);
    const int64_t cap = k == 1 ? 2 : 4;
    int64_t over = 0;
    for (int64_t e = 0; e < 3; ++e) {
      EXPECT_EQ(stats.kept[e], std::min(stats.routed[e], cap));
      over += std::max<int64_t>(stats.routed[e] - cap, 0);
    }
    EXPECT_GT(over, 0);  // the test drops something
    expect_matches_reference(*moe, x, over);
  }
  // A top-1 token that is dropped gets a zero output row.
  auto moe = make_moe(moe_config(2, 1, 0.1), 15);  // capacity ceil(0.1 * 6 / 2) = 1 per expert
  MoEStats stats;
  const auto y = moe->forward(randn({6, 4}, 16), &stats).to_vector();
  EXPECT_EQ(stats.dropped, 4);
  int zero_rows = 0;
  for (int n = 0; n < 6; ++n)
    zero_rows += y[n * 4] == 0 && y[n * 4 + 1] == 0 && y[n * 4 + 2] == 0 && y[n * 4 + 3] == 0;
  EXPECT_EQ(zero_rows, 4);
}

TEST(Moe, DroplessKeepsEveryAssignment) {
  auto moe = make_moe(moe_config(4, 2, 0.0), 17);
  MoEStats stats;
  moe->forward(randn({16, 4}, 18), &stats);
  EXPECT_EQ(stats.dropped, 0);
  EXPECT_EQ(stats.kept, stats.routed);
  int64_t total = 0;
  for (int64_t c : stats.kept) total += c;
  EXPECT_EQ(total, 32);
}

// Each token's output moves with the expert it is routed to and only with it: perturbing one
// expert's output bias changes exactly the rows routed there, by gate * delta. A token sent to
// the wrong expert (or gated by another expert's probability) fails this.
TEST(Moe, TokensReachTheirExpertsAndNoOther) {
  for (int64_t k : {1, 2}) {
    SCOPED_TRACE(k);
    auto moe = make_moe(moe_config(3, k), 19);
    const Tensor x = randn({7, 4}, 20);
    NoGradGuard ng;
    const auto base = moe->forward(x).to_vector();
    const Tensor probs = softmax(moe->router->forward(x));
    const auto p = probs.to_vector();
    for (int64_t e = 0; e < 3; ++e) {
      Tensor b = moe->experts[e]->c_proj->bias;
      b.data<double>()[0] += 1.0;
      const auto moved = moe->forward(x).to_vector();
      b.data<double>()[0] -= 1.0;
      for (int64_t n = 0; n < 7; ++n) {
        int rank = 0;  // how many experts beat e for token n (ties to the lower index)
        for (int64_t o = 0; o < 3; ++o)
          rank += p[n * 3 + o] > p[n * 3 + e] || (p[n * 3 + o] == p[n * 3 + e] && o < e);
        const double expect = rank < k ? p[n * 3 + e] : 0.0;
        EXPECT_NEAR(moved[n * 4] - base[n * 4], expect, 1e-12) << "expert " << e << " token " << n;
        EXPECT_EQ(moved[n * 4 + 1], base[n * 4 + 1]);
      }
    }
  }
}

TEST(Moe, GradientsMatchFiniteDifferences) {
  for (const auto& [k, cf] : {std::pair<int64_t, double>{1, 0.0}, {2, 0.0}, {2, 0.7}}) {
    SCOPED_TRACE(std::to_string(k) + " " + std::to_string(cf));
    auto moe = make_moe(moe_config(3, k, cf), 21);
    std::vector<Tensor> in{param({2, 3, 4}, 22)};
    for (const Tensor& p : moe->parameters()) in.push_back(p);
    gradcheck(
        "output", [&](auto& v) { return moe->forward(v[0]); }, in);
    // The auxiliary losses depend on the input and the router only.
    gradcheck("aux losses",
              [&](auto& v) {
                MoEStats s;
                moe->forward(v[0], &s);
                return add(s.load_balance, scale(s.z_loss, 0.3));
              },
              {in[0], moe->router->weight});
  }
}

TEST(Moe, AnIdleExpertGetsNoTokensAndNoGradient) {
  auto moe = make_moe(moe_config(3, 1), 23);
  {
    // Router rows a, -a, 0: logits (s, -s, 0), so expert 2 never wins.
    NoGradGuard ng;
    double* w = moe->router->weight.data<double>();
    for (int c = 0; c < 4; ++c) {
      w[4 + c] = -w[c];
      w[8 + c] = 0;
    }
  }
  const Tensor x = param({9, 4}, 24);
  MoEStats stats;
  sum(moe->forward(x, &stats)).backward();
  EXPECT_EQ(stats.kept[2], 0);
  EXPECT_GT(stats.kept[0], 0);
  EXPECT_GT(stats.kept[1], 0);
  for (const auto& [name, p] : moe->experts[2]->named_parameters())
    EXPECT_FALSE(p.grad().defined()) << name;
  EXPECT_TRUE(moe->experts[0]->c_fc->weight.grad().defined());
  expect_matches_reference(*moe, x.detach(), 0);
}

TEST(Moe, OneExpertIsTheDenseMlp) {
  const GPTConfig cfg = moe_config(1, 1);
  MoE moe(cfg);
  moe.init(25);
  nn::MLP mlp(cfg);
  mlp.load_state_dict(moe.experts[0]->state_dict());
  moe.to(DataType::kF64);
  mlp.to(DataType::kF64);
  Tensor x1 = randn({2, 3, 4}, 26), x2 = x1.clone();
  x1.set_requires_grad(true);
  x2.set_requires_grad(true);
  const Tensor y1 = moe.forward(x1), y2 = mlp.forward(x2);
  ASSERT_EQ(std::memcmp(y1.data_ptr(), y2.data_ptr(), y1.nbytes()), 0);
  sum(y1).backward();
  sum(y2).backward();
  EXPECT_EQ(std::memcmp(x1.grad().data_ptr(), x2.grad().data_ptr(), x1.grad().nbytes()), 0);
  const Tensor g1 = moe.experts[0]->c_fc->weight.grad(), g2 = mlp.c_fc->weight.grad();
  EXPECT_EQ(std::memcmp(g1.data_ptr(), g2.data_ptr(), g1.nbytes()), 0);
}

TEST(Moe, BadConfigurationIsRefused) {
  EXPECT_THROW(MoE(moe_config(0, 1)), InvalidArgument);
  EXPECT_THROW(MoE(moe_config(2, 3)), InvalidArgument);
  EXPECT_THROW(MoE(moe_config(1, 2)), InvalidArgument);
  EXPECT_THROW(MoE(moe_config(2, 1, -1.0)), InvalidArgument);
  GPTConfig cfg = moe_config(-1, 1);
  EXPECT_THROW(nn::GPT{cfg}, InvalidArgument);
  cfg = moe_config(2, 1);
  cfg.moe_every = 0;
  EXPECT_THROW(nn::GPT{cfg}, InvalidArgument);
}

// A checkpointed MoE block recomputes its routing and its auxiliary loss in backward: the loss
// and every gradient (the router's includes the auxiliary losses' share) are the bits of the
// run that keeps the activations. Without the auxiliary losses the router's gradient differs,
// so the comparison would see them dropped.
TEST(Moe, CheckpointedBlocksKeepTheirAuxiliaryLosses) {
  GPTConfig cfg{.vocab = 32,
                .context = 8,
                .layers = 2,
                .heads = 2,
                .width = 16,
                .experts = 4,
                .top_k = 2,
                .moe_every = 1,
                .capacity_factor = 1.25,
                .aux_loss_coef = 0.5,
                .z_loss_coef = 0.25};
  std::vector<int64_t> ids(2 * 8), tgt(2 * 8);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int64_t>((i * 7 + 3) % 32);
    tgt[i] = static_cast<int64_t>((i * 7 + 5) % 32);
  }
  const Tensor x = Tensor::from_vector(std::span<const int64_t>(ids), {2, 8});
  const Tensor y = Tensor::from_vector(std::span<const int64_t>(tgt), {2, 8});
  auto grads = [&](bool checkpointed, double* loss) {
    nn::GPT model(cfg);
    model.init(31);
    model.to(DataType::kF64);
    model.set_activation_checkpointing(checkpointed);
    Tensor l = model.loss(x, y);
    *loss = l.item();
    l.backward();
    std::vector<Tensor> out;
    for (const auto& [name, p] : model.named_parameters())
      out.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
    return out;
  };
  double kept = 0, recomputed = 0, without_aux = 0;
  const auto ref = grads(false, &kept);
  const auto got = grads(true, &recomputed);
  EXPECT_EQ(kept, recomputed);
  ASSERT_EQ(ref.size(), got.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(ref[i].defined(), got[i].defined()) << i;
    if (ref[i].defined()) {
      EXPECT_EQ(std::memcmp(ref[i].data_ptr(), got[i].data_ptr(), ref[i].nbytes()), 0) << i;
    }
  }
  cfg.aux_loss_coef = cfg.z_loss_coef = 0;
  const auto plain = grads(true, &without_aux);
  EXPECT_LT(without_aux, kept);
  bool router_differs = false;
  for (size_t i = 0; i < ref.size(); ++i)
    if (ref[i].defined() && plain[i].defined() &&
        std::memcmp(ref[i].data_ptr(), plain[i].data_ptr(), ref[i].nbytes()) != 0)
      router_differs = true;
  EXPECT_TRUE(router_differs);
}

// The GPT with experts: parameter names (every other block), the loss with its auxiliary terms,
// a falling loss, and the same bits at 1 and 2 threads (in f64: the f64 GEMM is always ours).
TEST(Moe, GptWithExpertsTrainsAndIsThreadCountIndependent) {
  const GPTConfig cfg{.vocab = 32,
                      .context = 8,
                      .layers = 2,
                      .heads = 2,
                      .width = 16,
                      .experts = 4,
                      .top_k = 2,
                      .moe_every = 2,
                      .capacity_factor = 1.25};
  {
    nn::GPT model(cfg);
    std::vector<std::string> names;
    for (const auto& [n, p] : model.named_parameters()) names.push_back(n);
    auto has = [&](const std::string& n) {
      return std::find(names.begin(), names.end(), n) != names.end();
    };
    EXPECT_TRUE(has("h.0.mlp.c_fc.weight"));
    EXPECT_TRUE(has("h.1.mlp.router.weight"));
    EXPECT_TRUE(has("h.1.mlp.experts.3.c_proj.bias"));
    EXPECT_FALSE(has("h.0.mlp.router.weight"));
    EXPECT_FALSE(has("h.1.mlp.c_fc.weight"));
  }
  std::vector<int64_t> ids(4 * 8), tgt(4 * 8);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int64_t>((i * 5 + 1) % 32);
    tgt[i] = static_cast<int64_t>((i * 5 + 6) % 32);
  }
  const Tensor x = Tensor::from_vector(std::span<const int64_t>(ids), {4, 8});
  const Tensor y = Tensor::from_vector(std::span<const int64_t>(tgt), {4, 8});
  const int threads_before = num_threads();
  auto train = [&](int threads, std::vector<double>* losses) {
    set_num_threads(threads);
    nn::GPT model(cfg);
    model.init(27);
    model.to(DataType::kF64);
    optim::AdamW opt(model.named_parameters(), {.lr = 1e-2});
    for (int step = 0; step < 8; ++step) {
      opt.zero_grad();
      Tensor loss = model.loss(x, y);
      losses->push_back(loss.item());
      loss.backward();
      opt.step();
    }
    // The loss is the cross-entropy plus the weighted auxiliary terms.
    NoGradGuard ng;
    const Tensor logits = model.forward(x);
    const double ce = cross_entropy(logits.view({32, 32}), y.reshape({32})).item();
    EXPECT_GT(model.loss(x, y).item(), ce);
    std::vector<Tensor> out;
    for (const auto& [name, p] : model.named_parameters()) out.push_back(p.detach().clone());
    return out;
  };
  std::vector<double> l1, l2;
  const auto one = train(1, &l1);
  const auto two = train(2, &l2);
  set_num_threads(threads_before);
  EXPECT_LT(l1.back(), l1.front() - 0.3);
  EXPECT_EQ(l1, l2);
  for (size_t i = 0; i < one.size(); ++i)
    EXPECT_EQ(std::memcmp(one[i].data_ptr(), two[i].data_ptr(), one[i].nbytes()), 0) << i;
}

}  // namespace
}  // namespace chorus::tensor
