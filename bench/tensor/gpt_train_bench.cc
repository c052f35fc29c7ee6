// tensor_bench — tokens/s of a GPT training step (forward, backward, AdamW) and the GEMM rate.
//
//   tensor_bench [--layers 4] [--width 256] [--heads 4] [--context 128] [--batch 8]
//                [--vocab 256] [--steps 20] [--warmup 3] [--threads 1,2] [--dtype f32|bf16|f16]
//                [--checkpoint]
//
// For each thread count: the sgemm rate of every GEMM backend at the selection shape, then the
// mean step time over --steps steps after --warmup, reported as tokens/s, with the share of
// the step's matmul FLOPs (6 * matmul parameters * tokens + attention) in GFLOP/s.
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
    if (k == "--layers") a.cfg.layers = std::stoll(next());
    else if (k == "--width") a.cfg.width = std::stoll(next());
    else if (k == "--heads") a.cfg.heads = std::stoll(next());
    else if (k == "--context") a.cfg.context = std::stoll(next());
    else if (k == "--vocab") a.cfg.vocab = std::stoll(next());
    else if (k == "--batch") a.batch = std::stoll(next());
    else if (k == "--steps") a.steps = std::stoll(next());
    else if (k == "--warmup") a.warmup = std::stoll(next());
    else if (k == "--checkpoint") a.checkpoint = true;
    else if (k == "--dtype") {
      auto d = parse_dtype(next());
      if (!d) { std::fprintf(stderr, "bad --dtype\n"); std::exit(2); }
      a.dtype = *d;
    } else if (k == "--threads") {
      a.threads.clear();
      std::stringstream ss(next());
      for (std::string t; std::getline(ss, t, ',');) a.threads.push_back(std::stoi(t));
    } else {
      std::fprintf(stderr, "unknown argument %s (see the header of gpt_train_bench.cc)\n", k.c_str());
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
  const double attention = double(B) * double(c.context) * double(c.context) * C;  // QK^T + AV, causal half
  return 2.0 * 3.0 * (double(c.layers) * (per_layer + attention) + lm_head);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  std::vector<uint8_t> text(1 << 16);
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  const ByteCorpus corpus(text);
  std::printf("# GPT layers=%lld width=%lld heads=%lld context=%lld batch=%lld vocab=%lld dtype=%s%s\n",
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
    double seconds = 0;
    for (int64_t s = 0; s < a.warmup + a.steps; ++s) {
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
        optim::clip_grad_norm(model.parameters(), 1.0);
        opt.step();
      }
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s >= a.warmup) seconds += dt;
    }
    const double per_step = seconds / double(a.steps);
    const double tokens = double(a.batch * a.cfg.context);
    std::printf("threads %d  gemm %-8s  step %7.1f ms  %8.0f tokens/s  %6.1f GFLOP/s (matmul FLOPs / step time)\n",
                threads, gemm_backend().c_str(), per_step * 1e3, tokens / per_step,
                step_flops(a.cfg, a.batch) / per_step * 1e-9);
    for (const auto& be : gemm_backends())
      if (be.available && be.measured_gflops > 0)
        std::printf("    sgemm %-8s %6.1f GFLOP/s at selection (%s)\n", be.name.c_str(),
                    be.measured_gflops, be.note.c_str());
  }
  return 0;
}
