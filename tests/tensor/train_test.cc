// End-to-end GPT training on a byte-level corpus (Debian's GPL-3 text, installed by
// base-files). Named *Slow*: labelled "slow" in ctest.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "chorus/tensor/amp.h"
#include "chorus/tensor/data.h"
#include "chorus/tensor/gemm.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/optim.h"

namespace chorus::tensor {
namespace {

constexpr const char* kCorpus = "/usr/share/common-licenses/GPL-3";

struct RunOptions {
  int64_t steps = 200;
  DataType compute = DataType::kF32;  // kBF16 / kF16: autocast (f16 with loss scaling)
  bool checkpoint = false;
};

// Trains a 2-layer GPT and returns the loss of every step.
std::vector<double> train_gpt(const ByteCorpus& corpus, const RunOptions& run) {
  nn::GPTConfig cfg{.vocab = 256, .context = 64, .layers = 2, .heads = 4, .width = 64};
  nn::GPT model(cfg);
  model.init(1337);
  model.set_activation_checkpointing(run.checkpoint);
  optim::AdamW opt(model.named_parameters(), {.lr = 3e-3, .weight_decay = 0.1});
  optim::CosineSchedule sched{.max_lr = 3e-3, .min_lr = 3e-4, .warmup = 20, .total = run.steps};
  GradScaler scaler;
  BatchSampler sampler(corpus, 8, cfg.context, 2024);
  std::vector<double> losses;
  for (int64_t step = 0; step < run.steps; ++step) {
    auto [x, y] = sampler.batch(step);
    opt.set_lr(sched.at(step));
    opt.zero_grad();
    AutocastGuard autocast(run.compute);
    Tensor loss = model.loss(x, y, step);
    losses.push_back(loss.item());
    if (run.compute == DataType::kF16) {
      scaler.scale(loss).backward();
      scaler.step(opt);  // unscales; skips the step on inf/nan
      scaler.update();
    } else {
      loss.backward();
      optim::clip_grad_norm(model.parameters(), 1.0);
      opt.step();
    }
  }
  return losses;
}

double mean_of(const std::vector<double>& v, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += v[i];
  return s / static_cast<double>(to - from);
}

TEST(TrainSlow, GptLossFallsOnByteCorpus) {
  if (!std::filesystem::exists(kCorpus)) GTEST_SKIP() << kCorpus << " not installed";
  const ByteCorpus corpus = ByteCorpus::from_file(kCorpus);
  const auto losses = train_gpt(corpus, {});
  for (size_t s = 0; s < losses.size(); s += 20)
    std::printf("  step %3zu loss %.4f\n", s, losses[s]);
  std::printf("  step %3zu loss %.4f\n", losses.size() - 1, losses.back());
  // A uniform guess over 256 bytes costs ln 256 = 5.545.
  EXPECT_NEAR(losses[0], std::log(256.0), 0.3);
  const double last = mean_of(losses, losses.size() - 10, losses.size());
  EXPECT_LT(last, 2.8) << "mean loss of the last 10 steps";
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
}

// bf16 and fp16 autocast runs follow the f32 run. Single steps are a noisy yardstick (one
// batch, and rounding differences grow along the trajectory), so the comparison is on means of
// 10 consecutive steps: every window within 0.1 of f32's but at most one, which may be off by
// up to 0.5, and the last window within 0.05.
// Why one window may be off: at this learning rate (3e-3, the end of warm-up at step 20) the run
// is at the edge of stability, and a 16-bit run can take a transient loss spike that f32 did not
// (or the reverse), then come back onto f32's curve. Which runs spike depends on rounding-level
// differences (GEMM summation order): measured over every f32 GEMM backend and both bf16 GEMM
// ways, the worst window ranged from 0.018 to 0.31 (one spike, steps 20-29), while the other
// windows stayed within 0.03 and the last one within 0.022. A precision bug shows as a lasting
// offset, which the other windows and the last one catch. The f32 GEMM is pinned to the builtin
// kernel so the trajectory does not depend on the measured choice (that is, on machine load).
TEST(TrainSlow, MixedPrecisionTracksFloat32) {
  if (!std::filesystem::exists(kCorpus)) GTEST_SKIP() << kCorpus << " not installed";
  const ByteCorpus corpus = ByteCorpus::from_file(kCorpus);
  set_gemm_backend("builtin");
  const int64_t steps = 100;
  const auto f32 = train_gpt(corpus, {.steps = steps});
  for (DataType dt : {DataType::kBF16, DataType::kF16}) {
    const auto lowp = train_gpt(corpus, {.steps = steps, .compute = dt});
    double worst = 0;
    int off = 0;  // windows beyond 0.1
    std::string windows;
    for (int64_t s = 0; s + 10 <= steps; s += 10) {
      const double d = mean_of(lowp, s, s + 10) - mean_of(f32, s, s + 10);
      worst = std::max(worst, std::abs(d));
      off += std::abs(d) > 0.1;
      char buf[16];
      std::snprintf(buf, sizeof(buf), " %+.3f", d);
      windows += buf;
    }
    std::printf("  %s: 10-step mean - f32's:%s\n", std::string(to_string(dt)).c_str(),
                windows.c_str());
    const double end_f32 = mean_of(f32, steps - 10, steps),
                 end_lowp = mean_of(lowp, steps - 10, steps);
    std::printf("  %s: max |10-step mean - f32's| = %.4f; last 10: %.4f vs f32 %.4f\n",
                std::string(to_string(dt)).c_str(), worst, end_lowp, end_f32);
    EXPECT_LE(off, 1) << to_string(dt) << ": windows off by more than 0.1";
    EXPECT_LT(worst, 0.5) << to_string(dt);
    EXPECT_NEAR(end_lowp, end_f32, 0.05) << to_string(dt);
  }
}

}  // namespace
}  // namespace chorus::tensor
