// tensor_bench — tokens/s of a GPT training step (forward, backward, AdamW) and the GEMM rate.
//
//   tensor_bench [--layers 4] [--width 256] [--heads 4] [--context 128] [--batch 8]
//                [--vocab 256] [--steps 20] [--warmup 3] [--threads 1,2] [--dtype f32|bf16|f16]
//                [--checkpoint] [--clip NORM] [--gemm]
//
// A step is what the PyTorch anchor (shared/anchors/torch_gpt/gpt_step.py) times: zero_grad,
// forward + loss, backward, AdamW step; --clip adds clip_grad_norm (off by default, as there).
// Reported: the median step time over --steps steps after --warmup ([min-max]), tokens/s from
// the median, and the process CPU time per wall time over the timed steps (how many cores the
// step really got: below the thread count when other processes share the machine).
//
// --gemm: instead of training, the f32 GEMM rate of every backend at each matmul shape of the
// step (and 1024^3), median of 9 timed rounds after a warm-up, rounds alternating backends.
//
// For each thread count: the step time and tokens/s, the step's matmul FLOPs (6 * matmul
// parameters * tokens + causal attention) over the step time in GFLOP/s, the f32 GEMM backend
// ("by class" and the plan below it when the shape classes differ, gemm.h: gemm_backend), the
// sgemm rate of every GEMM backend measured at selection (over the classes' shapes), and under
// --dtype bf16 the autocast GEMM's method per shape class (gemm.h: bf16_gemm_mode). Both choices
// are made once per process, at the first GEMM, on the first thread count.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "chorus/tensor/amp.h"
#include "chorus/tensor/data.h"
#include "chorus/tensor/gemm.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/optim.h"

using namespace chorus;
using namespace chorus::tensor;

namespace {

struct Args {
  nn::GPTConfig cfg{.vocab = 256, .context = 128, .layers = 4, .heads = 4, .width = 256};
  int64_t batch = 8, steps = 20, warmup = 3;
  std::vector<int> threads{1, 2};
  DataType dtype = DataType::kF32;
  bool checkpoint = false;
  bool gemm = false;
  double clip = 0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--layers")
      a.cfg.layers = std::stoll(next());
    else if (k == "--width")
      a.cfg.width = std::stoll(next());
    else if (k == "--heads")
      a.cfg.heads = std::stoll(next());
    else if (k == "--context")
      a.cfg.context = std::stoll(next());
    else if (k == "--vocab")
      a.cfg.vocab = std::stoll(next());
    else if (k == "--batch")
      a.batch = std::stoll(next());
    else if (k == "--steps")
      a.steps = std::stoll(next());
    else if (k == "--warmup")
      a.warmup = std::stoll(next());
    else if (k == "--checkpoint")
      a.checkpoint = true;
    else if (k == "--gemm")
      a.gemm = true;
    else if (k == "--clip")
      a.clip = std::stod(next());
    else if (k == "--dtype") {
      auto d = parse_dtype(next());
      if (!d) {
        std::fprintf(stderr, "bad --dtype\n");
        std::exit(2);
      }
      a.dtype = *d;
    } else if (k == "--threads") {
      a.threads.clear();
      std::stringstream ss(next());
      for (std::string t; std::getline(ss, t, ',');) a.threads.push_back(std::stoi(t));
    } else {
      std::fprintf(stderr, "unknown argument %s (see the header of gpt_train_bench.cc)\n",
                   k.c_str());
      std::exit(2);
    }
  }
  return a;
}

// FLOPs of one training step's matmuls: 2 per multiply-add, x3 for forward + two backward GEMMs.
double step_flops(const nn::GPTConfig& c, int64_t B) {
  const double N = double(B) * double(c.context), C = double(c.width);
  const double per_layer = N * (C * 3 * C + C * C + C * 4 * C + 4 * C * C);
  const double lm_head = N * C * double(c.vocab);
  const double attention =
      double(B) * double(c.context) * double(c.context) * C;  // QK^T + AV, causal half
  return 2.0 * 3.0 * (double(c.layers) * (per_layer + attention) + lm_head);
}

struct GemmShape {
  const char* what;
  bool ta, tb;
  int64_t m, n, k;
};

// The f32 GEMMs of one training step of the configured GPT (N = B*T rows), plus 1024^3.
std::vector<GemmShape> step_shapes(const nn::GPTConfig& c, int64_t B) {
  const int64_t N = B * c.context, C = c.width;
  return {{"qkv fwd   x W^T", false, true, N, 3 * C, C},
          {"qkv dx    dy W", false, false, N, C, 3 * C},
          {"qkv dW    dy^T x", true, false, 3 * C, C, N},
          {"fc fwd", false, true, N, 4 * C, C},
          {"fc2 fwd", false, true, N, C, 4 * C},
          {"fc2 dW", true, false, C, 4 * C, N},
          {"proj fwd", false, true, N, C, C},
          {"lm_head fwd", false, true, N, c.vocab, C},
          {"attn QK^T (1 head)", false, true, c.context, c.context, C / c.heads},
          {"square 1024", false, false, 1024, 1024, 1024}};
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void gemm_rates(const Args& a) {
  for (int threads : a.threads) {
    set_num_threads(threads);
    const std::string chosen = gemm_backend();
    std::vector<std::string> names;
    for (const auto& be : gemm_backends())
      if (be.available) names.push_back(be.name);
    std::printf("threads %d (auto choice: %s); GFLOP/s, median of 9 rounds:\n  %-20s %5s %5s %5s",
                threads, chosen.c_str(), "shape", "M", "N", "K");
    for (const auto& n : names) std::printf(" %9s", n.c_str());
    std::printf("\n");
    for (const GemmShape& sh : step_shapes(a.cfg, a.batch)) {
      std::vector<float> A(static_cast<size_t>(sh.m * sh.k), 0.5f),
          Bm(static_cast<size_t>(sh.k * sh.n), 0.25f), Cm(static_cast<size_t>(sh.m * sh.n));
      const double flops = 2.0 * double(sh.m) * double(sh.n) * double(sh.k);
      const int inner = std::max(1, static_cast<int>(2e8 / flops));
      std::vector<std::vector<double>> t(names.size());
      for (int round = 0; round < 10; ++round)
        for (size_t b = 0; b < names.size(); ++b) {
          set_gemm_backend(names[b]);
          const auto t0 = std::chrono::steady_clock::now();
          for (int r = 0; r < inner; ++r)
            gemm(sh.ta, sh.tb, sh.m, sh.n, sh.k, 1.f, A.data(), sh.ta ? sh.m : sh.k, Bm.data(),
                 sh.tb ? sh.k : sh.n, 0.f, Cm.data(), sh.n);
          const double dt =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (round > 0) t[b].push_back(dt / inner);
        }
      std::printf("  %-20s %5lld %5lld %5lld", sh.what, (long long)sh.m, (long long)sh.n,
                  (long long)sh.k);
      for (size_t b = 0; b < names.size(); ++b) std::printf(" %9.1f", flops / median(t[b]) * 1e-9);
      std::printf("\n");
    }
    set_gemm_backend(chosen);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.gemm) {
    gemm_rates(a);
    return 0;
  }
  std::vector<uint8_t> text(1 << 16);
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  const ByteCorpus corpus(text);
  std::printf(
      "# GPT layers=%lld width=%lld heads=%lld context=%lld batch=%lld vocab=%lld dtype=%s%s\n",
      (long long)a.cfg.layers, (long long)a.cfg.width, (long long)a.cfg.heads,
      (long long)a.cfg.context, (long long)a.batch, (long long)a.cfg.vocab,
      std::string(to_string(a.dtype)).c_str(), a.checkpoint ? " checkpointed" : "");
  for (int threads : a.threads) {
    set_num_threads(threads);
    nn::GPT model(a.cfg);
    model.init(1);
    model.set_activation_checkpointing(a.checkpoint);
    optim::AdamW opt(model.named_parameters(), {.lr = 1e-4, .weight_decay = 0.1});
    GradScaler scaler;
    BatchSampler sampler(corpus, a.batch, a.cfg.context, 3);
    std::vector<double> times;
    double cpu0 = 0;
    auto wall_start = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < a.warmup + a.steps; ++s) {
      if (s == a.warmup) {
        cpu0 = cpu_seconds();
        wall_start = std::chrono::steady_clock::now();
      }
      auto [x, y] = sampler.batch(s);
      const auto t0 = std::chrono::steady_clock::now();
      opt.zero_grad();
      AutocastGuard autocast(a.dtype);
      Tensor loss = model.loss(x, y, s);
      if (a.dtype == DataType::kF16) {
        scaler.scale(loss).backward();
        scaler.step(opt);
        scaler.update();
      } else {
        loss.backward();
        if (a.clip > 0) optim::clip_grad_norm(model.parameters(), a.clip);
        opt.step();
      }
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s >= a.warmup) times.push_back(dt);
    }
    const double cpu_per_wall =
        (cpu_seconds() - cpu0) /
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    const double per_step = median(times);
    const double tokens = double(a.batch * a.cfg.context);
    // The f32 GEMM plan: one backend, or "by class" and the plan on a line of its own.
    const std::string plan = gemm_backend();
    const bool by_class = plan.find('=') != std::string::npos;
    std::printf(
        "threads %d  gemm %-8s  step %7.1f ms [%.1f-%.1f]  %8.0f tokens/s  %6.1f GFLOP/s"
        "  cpu/wall %.2f\n",
        threads, by_class ? "by class" : plan.c_str(), per_step * 1e3,
        *std::min_element(times.begin(), times.end()) * 1e3,
        *std::max_element(times.begin(), times.end()) * 1e3, tokens / per_step,
        step_flops(a.cfg, a.batch) / per_step * 1e-9, cpu_per_wall);
    if (by_class) std::printf("    f32 gemm %s\n", plan.c_str());
    // The autocast GEMM's choice per shape class (CHORUS_DEBUG=INFO shows the rates behind it).
    if (a.dtype == DataType::kBF16) std::printf("    bf16 gemm %s\n", bf16_gemm_mode().c_str());
    for (const auto& be : gemm_backends())
      if (be.available && be.measured_gflops > 0)
        std::printf("    sgemm %-8s %6.1f GFLOP/s at selection (%s)\n", be.name.c_str(),
                    be.measured_gflops, be.note.c_str());
  }
  return 0;
}
