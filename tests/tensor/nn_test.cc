// Modules, optimizers, checkpointing, save/load, data: the fast tests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "chorus/tensor/amp.h"
#include "chorus/tensor/checkpoint.h"
#include "chorus/tensor/data.h"
#include "chorus/tensor/gemm.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/optim.h"
#include "chorus/tensor/serialize.h"
#include "gradcheck.h"

namespace chorus::tensor {
namespace {

using nn::GPT;
using nn::GPTConfig;

GPTConfig tiny() { return {.vocab = 256, .context = 16, .layers = 2, .heads = 2, .width = 32}; }

std::pair<Tensor, Tensor> tiny_batch(int64_t step, int64_t B = 3, int64_t T = 16) {
  static const ByteCorpus corpus = [] {
    std::vector<uint8_t> text;
    const std::string s = "the quick brown fox jumps over the lazy dog. ";
    for (int i = 0; i < 40; ++i) text.insert(text.end(), s.begin(), s.end());
    return ByteCorpus(text);
  }();
  return BatchSampler(corpus, B, T, 5).batch(step);
}

TEST(Nn, ParameterNamesAreStableAndHierarchical) {
  GPT model(tiny());
  auto named = model.named_parameters();
  std::vector<std::string> names;
  for (auto& [n, t] : named) names.push_back(n);
  ASSERT_GE(names.size(), 4u);
  EXPECT_EQ(names[0], "wte.weight");
  EXPECT_EQ(names[1], "wpe.weight");
  EXPECT_EQ(names[2], "h.0.ln_1.weight");
  EXPECT_NE(std::find(names.begin(), names.end(), "h.1.attn.c_attn.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "h.1.mlp.c_proj.bias"), names.end());
  EXPECT_EQ(names.back(), "ln_f.bias");
  // 12 per block + wte, wpe, ln_f (2).
  EXPECT_EQ(names.size(), 2u + 12u * 2 + 2u);
  const int64_t C = 32, V = 256, T = 16;
  EXPECT_EQ(model.num_parameters(), V * C + T * C + 2 * (12 * C * C + 13 * C) + 2 * C);
}

TEST(Nn, InitDependsOnSeedAndNameOnly) {
  GPT a(tiny()), b(tiny());
  a.init(7);
  b.init(7);
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.to_vector(), pb[i].second.to_vector());
  // A model with a different depth shares the values of the blocks it has in common.
  GPTConfig deeper = tiny();
  deeper.layers = 3;
  GPT c(deeper);
  c.init(7);
  const auto pc = c.named_parameters();
  std::map<std::string, Tensor> cp(pc.begin(), pc.end()), ap(pa.begin(), pa.end());
  EXPECT_EQ(cp.at("h.1.attn.c_attn.weight").to_vector(),
            ap.at("h.1.attn.c_attn.weight").to_vector());
  // LayerNorm gains start at 1, biases at 0.
  for (double v : ap.at("h.0.ln_1.weight").to_vector()) EXPECT_EQ(v, 1.0);
  for (double v : ap.at("h.0.attn.c_attn.bias").to_vector()) EXPECT_EQ(v, 0.0);
}

// GPT forward/backward in f64 against finite differences on a few parameters.
TEST(Nn, GptGradientsMatchFiniteDifferences) {
  GPTConfig cfg{.vocab = 11, .context = 5, .layers = 1, .heads = 2, .width = 6};
  GPT model(cfg);
  model.init(3);
  for (auto& [n, p] : model.named_parameters()) {
    Tensor d = p.to(DataType::kF64).detach();
    p.impl()->storage = d.storage();  // make the model f64 in place (test-only surgery)
    p.impl()->dtype = DataType::kF64;
    p.impl()->offset = 0;
  }
  Tensor idx = testing::randint({2, 5}, 11, 1), tgt = testing::randint({2, 5}, 11, 2);
  model.loss(idx, tgt).backward();
  for (auto& [name, p] : model.named_parameters()) {
    SCOPED_TRACE(name);
    const auto g = p.grad().to_vector();
    double* x = p.data<double>();
    for (int64_t j = 0; j < std::min<int64_t>(p.numel(), 6); ++j) {
      NoGradGuard ng;
      const double s = x[j], h = 1e-6;
      x[j] = s + h;
      const double lp = model.loss(idx, tgt).item();
      x[j] = s - h;
      const double lm = model.loss(idx, tgt).item();
      x[j] = s;
      EXPECT_NEAR(g[j], (lp - lm) / (2 * h), 1e-6 + 1e-5 * std::abs(g[j]));
    }
  }
}

TEST(Nn, EveryParameterHookFiresOncePerBackward) {
  GPT model(tiny());
  model.init(1);
  std::map<std::string, int> fired;
  for (auto& [name, p] : model.named_parameters())
    p.register_grad_ready_hook([&fired, name = name](Tensor& g) {
      EXPECT_TRUE(g.defined());
      ++fired[name];
    });
  auto [x, y] = tiny_batch(0);
  model.loss(x, y).backward();
  EXPECT_EQ(fired.size(), model.named_parameters().size());
  // Includes wte, used twice (embedding and the tied lm_head): one call, after both.
  for (auto& [n, c] : fired) EXPECT_EQ(c, 1) << n;
}

TEST(Nn, ActivationCheckpointingGivesEqualGradientsWithLessMemory) {
  GPTConfig cfg{.vocab = 256, .context = 64, .layers = 3, .heads = 4, .width = 64, .dropout = 0.1};
  auto run = [&](bool ckpt, int64_t& peak_extra) {
    GPT model(cfg);
    model.init(11);
    model.dropout_seed = 5;
    model.set_activation_checkpointing(ckpt);
    std::map<std::string, int> fired;
    for (auto& [name, p] : model.named_parameters())
      p.register_grad_ready_hook([&fired, name = name](Tensor&) { ++fired[name]; });
    auto [x, y] = tiny_batch(3, 4, 64);
    reset_peak_memory();
    const int64_t base = memory_stats().current_bytes;
    Tensor loss = model.loss(x, y, /*step=*/9);
    loss.backward();
    peak_extra = memory_stats().peak_bytes - base;
    for (auto& [n, c] : fired) EXPECT_EQ(c, 1) << n << (ckpt ? " (checkpointed)" : "");
    EXPECT_EQ(fired.size(), model.named_parameters().size());
    std::vector<std::vector<double>> grads;
    for (auto& p : model.parameters()) grads.push_back(p.grad().to_vector());
    grads.push_back({loss.item()});
    return grads;
  };
  int64_t peak_plain = 0, peak_ckpt = 0;
  const auto plain = run(false, peak_plain);
  const auto ckpt = run(true, peak_ckpt);
  ASSERT_EQ(plain.size(), ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(plain[i], ckpt[i]) << "tensor " << i;
  std::printf("  peak bytes above the model: plain %lld, checkpointed %lld (%.0f%%)\n",
              static_cast<long long>(peak_plain), static_cast<long long>(peak_ckpt),
              100.0 * double(peak_ckpt) / double(peak_plain));
  EXPECT_LT(peak_ckpt, peak_plain * 3 / 4);
}

// Our kernels split their work into pieces fixed by the shapes, so the thread count changes no
// bit: three steps of AdamW with accumulation and clipping, at 1, 2 and 3 threads (a model large
// enough for every kernel to use the team). Our f32 GEMM, not a library's that timing may pick
// (one called per thread's rows rounds by its own blocking).
TEST(Nn, TrainingGivesTheSameBitsAtEveryThreadCount) {
  const int threads_before = num_threads();
  const std::string backend_before = gemm_backend();
  set_gemm_backend("builtin");
  const GPTConfig cfg{.vocab = 256, .context = 32, .layers = 2, .heads = 4, .width = 64};
  auto train = [&](int threads) {
    set_num_threads(threads);
    GPT model(cfg);
    model.init(5);
    optim::AdamW opt(model.named_parameters(), {.lr = 1e-2});
    for (int step = 0; step < 3; ++step) {
      for (int k = 0; k < 2; ++k) {
        std::vector<int64_t> ids(8 * 32), targets(8 * 32);
        for (size_t i = 0; i < ids.size(); ++i) {
          ids[i] = static_cast<int64_t>((i * 7 + static_cast<size_t>(step * 3 + k)) % 256);
          targets[i] = static_cast<int64_t>((i * 11 + 5) % 256);
        }
        const Tensor x = Tensor::from_vector(std::span<const int64_t>(ids), {8, 32});
        const Tensor y = Tensor::from_vector(std::span<const int64_t>(targets), {8, 32});
        scale(model.loss(x, y), 0.5).backward();
      }
      optim::clip_grad_norm(opt, 0.5);
      opt.step();
      opt.zero_grad();
    }
    std::vector<Tensor> out;
    for (const auto& [name, p] : model.named_parameters()) out.push_back(p.detach().clone());
    return out;
  };
  const std::vector<Tensor> one = train(1);
  for (int threads : {2, 3}) {
    const std::vector<Tensor> got = train(threads);
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_EQ(std::memcmp(got[i].data_ptr(), one[i].data_ptr(), one[i].nbytes()), 0)
          << "parameter " << i << " at " << threads << " threads";
  }
  set_num_threads(threads_before);
  set_gemm_backend(backend_before);
}

TEST(Nn, AdamWMatchesReferenceUpdate) {
  Tensor p = Tensor::from_vector(std::vector<double>{1.0, -2.0, 0.5, 3.0}, {2, 2}, DataType::kF64);
  p.set_requires_grad(true);
  optim::AdamW opt({{"p", p}},
                   {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1});
  std::vector<double> ref = p.to_vector(), m(4, 0), v(4, 0);
  for (int t = 1; t <= 3; ++t) {
    p.set_grad(Tensor::from_vector(std::vector<double>{0.1 * t, -0.2, 0.3, -0.4 * t}, {2, 2},
                                   DataType::kF64));
    const auto g = p.grad().to_vector();
    opt.step();
    for (int i = 0; i < 4; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.99 * v[i] + 0.01 * g[i] * g[i];
      const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.99, t));
      ref[i] -= 0.1 * (mh / (std::sqrt(vh) + 1e-8) + 0.1 * ref[i]);
    }
    const auto got = p.to_vector();
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(got[i], ref[i], 1e-6);  // f32 hyper-parameters
  }
}

TEST(Nn, SgdClipAndSchedule) {
  Tensor p = Tensor::from_vector(std::vector<double>{1.0, 2.0}, {2}, DataType::kF64);
  p.set_requires_grad(true);
  optim::SGD sgd({{"p", p}}, {.lr = 0.5, .momentum = 0.9});
  p.set_grad(Tensor::from_vector(std::vector<double>{3.0, 4.0}, {2}, DataType::kF64));
  EXPECT_NEAR(optim::clip_grad_norm({p}, 1.0), 5.0, 1e-12);
  auto g = p.grad().to_vector();
  EXPECT_NEAR(std::hypot(g[0], g[1]), 1.0, 1e-6);
  sgd.step();
  sgd.step();  // momentum: b = g, then 1.9 g
  auto v = p.to_vector();
  EXPECT_NEAR(v[0], 1.0 - 0.5 * (1 + 1.9) * g[0], 1e-9);
  optim::CosineSchedule s{.max_lr = 1.0, .min_lr = 0.1, .warmup = 10, .total = 110};
  EXPECT_NEAR(s.at(0), 0.1, 1e-12);
  EXPECT_NEAR(s.at(9), 1.0, 1e-12);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
}

TEST(Nn, GradScalerSkipsOverflowAndAdjustsScale) {
  Tensor p = Tensor::from_vector(std::vector<double>{1.0}, {1}, DataType::kF32);
  p.set_requires_grad(true);
  optim::SGD sgd({{"p", p}}, {.lr = 1.0});
  GradScaler scaler(
      {.init_scale = 1024, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 2});
  p.set_grad(Tensor::full({1}, INFINITY));
  EXPECT_FALSE(scaler.step(sgd));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 512);
  EXPECT_EQ(p.item(), 1.0);
  for (int i = 0; i < 2; ++i) {
    p.set_grad(Tensor::full({1}, 512.0));  // unscales to 1
    EXPECT_TRUE(scaler.step(sgd));
    scaler.update();
  }
  EXPECT_EQ(p.item(), -1.0);
  EXPECT_EQ(scaler.get_scale(), 1024);
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

// Several optimizers of one model step together or not at all: an inf in one skips both, and so
// does another rank's verdict (overflow_elsewhere) when every gradient here is finite.
TEST(Nn, GradScalerStepsSeveralOptimizersAllOrNone) {
  Tensor a = Tensor::from_vector(std::vector<double>{1.0}, {1}, DataType::kF32);
  Tensor b = Tensor::from_vector(std::vector<double>{1.0}, {1}, DataType::kF32);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  optim::SGD sa({{"a", a}}, {.lr = 1.0}), sb({{"b", b}}, {.lr = 1.0});
  GradScaler scaler({.init_scale = 4, .growth_interval = 100});
  a.set_grad(Tensor::full({1}, 4.0));
  b.set_grad(Tensor::full({1}, INFINITY));
  EXPECT_FALSE(scaler.step({&sa, &sb}));
  scaler.update();
  EXPECT_EQ(a.item(), 1.0);  // a's gradient was finite, yet a did not move
  EXPECT_EQ(scaler.get_scale(), 2);
  a.set_grad(Tensor::full({1}, 2.0));
  b.set_grad(Tensor::full({1}, 2.0));
  EXPECT_FALSE(scaler.step({&sa, &sb}, /*overflow_elsewhere=*/true));
  scaler.update();
  EXPECT_EQ(a.item(), 1.0);
  EXPECT_EQ(b.item(), 1.0);
  EXPECT_EQ(scaler.get_scale(), 1);
  a.set_grad(Tensor::full({1}, 1.0));
  b.set_grad(Tensor::full({1}, 3.0));
  EXPECT_TRUE(scaler.step({&sa, &sb}));
  EXPECT_EQ(a.item(), 0.0);
  EXPECT_EQ(b.item(), -2.0);
  EXPECT_EQ(scaler.skipped_steps(), 2);
}

TEST(Nn, SaveLoadRoundTripsBitExactly) {
  // Per process: ctest runs this test in more than one entry at once (plain and under autocast).
  const std::string dir = ::testing::TempDir() + "chorus-nn-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto train = [](GPT& model, optim::AdamW& opt, int64_t from, int64_t to) {
    for (int64_t s = from; s < to; ++s) {
      opt.zero_grad();
      auto [x, y] = tiny_batch(s);
      model.loss(x, y).backward();
      optim::clip_grad_norm(model.parameters(), 1.0);
      opt.step();
    }
  };
  GPT a(tiny());
  a.init(21);
  optim::AdamW oa(a.named_parameters(), {.lr = 1e-3, .weight_decay = 0.1});
  train(a, oa, 0, 3);
  save_tensors(dir + "/model.chk", a.state_dict());
  save_tensors(dir + "/optim.chk", oa.state_dict());
  train(a, oa, 3, 5);

  GPT b(tiny());  // uninitialised: everything comes from the files
  optim::AdamW ob(b.named_parameters(), {.lr = 1e-3, .weight_decay = 0.1});
  b.load_state_dict(load_tensors(dir + "/model.chk"));
  ob.load_state_dict(load_tensors(dir + "/optim.chk"));
  EXPECT_EQ(ob.step_count(), 3);
  train(b, ob, 3, 5);
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    ASSERT_EQ(pa[i].nbytes(), pb[i].nbytes());
    EXPECT_EQ(std::memcmp(pa[i].data_ptr(), pb[i].data_ptr(), pa[i].nbytes()), 0) << i;
  }
  // Files hold every dtype bit-exactly.
  nn::NamedTensors mixed{{"bf16", testing::randn({3, 5}, 1, DataType::kBF16)},
                         {"f16", testing::randn({7}, 2, DataType::kF16)},
                         {"i32", testing::randint({4}, 100, 3, DataType::kI32)},
                         {"scalar", Tensor::full({}, 2.5, DataType::kF64)}};
  save_tensors(dir + "/mixed.chk", mixed);
  auto back = load_tensors(dir + "/mixed.chk");
  ASSERT_EQ(back.size(), mixed.size());
  for (size_t i = 0; i < mixed.size(); ++i) {
    EXPECT_EQ(back[i].first, mixed[i].first);
    EXPECT_EQ(back[i].second.dtype(), mixed[i].second.dtype());
    EXPECT_EQ(back[i].second.shape(), mixed[i].second.shape());
    EXPECT_EQ(std::memcmp(back[i].second.data_ptr(), mixed[i].second.data_ptr(),
                          mixed[i].second.nbytes()),
              0);
  }
  EXPECT_THROW(load_tensors(dir + "/does-not-exist.chk"), Error);
  std::filesystem::remove_all(dir);
}

TEST(Nn, SamplerIsDeterministicAndSeekable) {
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  ByteCorpus corpus(bytes);
  BatchSampler s(corpus, 4, 32, 9);
  auto [x5, y5] = s.batch(5);
  auto [x5b, y5b] = BatchSampler(corpus, 4, 32, 9).batch(5);
  EXPECT_EQ(x5.to_vector(), x5b.to_vector());
  EXPECT_NE(s.batch(6).first.to_vector(), x5.to_vector());
  auto xv = x5.to_vector(), yv = y5.to_vector();
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t + 1 < 32; ++t) EXPECT_EQ(yv[r * 32 + t], xv[r * 32 + t + 1]);
}

}  // namespace
}  // namespace chorus::tensor
