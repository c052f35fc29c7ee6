// chorus-scaling — one data-parallel training run of the tensor engine's GPT, timed step by step:
// what bench/parallel/scaling.py runs at dp = 1, 2, 4 beside PyTorch.
//
//   chorus-run -n 2 build/bin/chorus-scaling --mode ddp|nosync|zero1|zero2|zero3
//              [--layers 4] [--width 256] [--heads 4] [--context 128] [--batch 8]
//              [--steps 30] [--warmup 5] [--threads 1] [--bucket-mb 25] [--json FILE]
//
// The defaults are the PyTorch anchor's small config (shared/anchors/torch_gpt/gpt_step.py:
// vocab 256, context 128, 4 layers, width 256, 4 heads, batch 8 per rank, AdamW lr 3e-4,
// weight decay 0.1). A step is what the anchor's ddp modes time: forward + loss, backward,
// optimizer step, zero_grad; it goes through parallel::Replicas as chorus-train's does (its
// finish_step also takes the global gradient norm, unclipped here). Modes:
//   ddp     DistributedDataParallel + AdamW attached
//   nosync  the same with every backward inside no_sync(): no communication at all, the
//           compute-only ceiling of these ranks (parameters drift apart: timing only)
//   zero1-3 ZeroOptimizer of that stage
// Per step the slowest rank's time counts (every rank's step times are max-reduced after the
// run). Reported on rank 0 as one line "RESULT {json}": median step time and global tokens/s
// over the timed steps, and for ddp the reductions' exposure: `exposed_ms` is the time per step
// spent waiting for reductions after backward's compute (Replicas::reductions()), `comm_alone_ms`
// the time the same bucket all-reduces take back to back with nothing else running (measured after
// the training steps), and `hidden` = 1 - exposed / alone, the share hidden behind backward.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/parallel/mesh.h"
#include "chorus/parallel/replicas.h"
#include "chorus/tensor/data.h"
#include "chorus/tensor/gemm.h"
#include "chorus/tensor/nn.h"

namespace {

using namespace chorus;
using tensor::Tensor;

struct Args {
  std::string mode = "ddp";
  tensor::nn::GPTConfig cfg{.vocab = 256, .context = 128, .layers = 4, .heads = 4, .width = 256};
  int64_t batch = 8;
  int steps = 30, warmup = 5, threads = 1;
  double bucket_mb = 25;
  std::string json;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "chorus-scaling: %s (see the header of bench/parallel/scaling_bench.cc)\n",
               what.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(k + " needs a value");
      return argv[++i];
    };
    try {
      if (k == "--mode")
        a.mode = next();
      else if (k == "--layers")
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
        a.steps = std::stoi(next());
      else if (k == "--warmup")
        a.warmup = std::stoi(next());
      else if (k == "--threads")
        a.threads = std::stoi(next());
      else if (k == "--bucket-mb")
        a.bucket_mb = std::stod(next());
      else if (k == "--json")
        a.json = next();
      else
        usage_error("unknown argument " + k);
    } catch (const std::logic_error&) {
      usage_error(k + ": not a number");
    }
  }
  const std::vector<std::string> modes{"ddp", "nosync", "zero1", "zero2", "zero3"};
  if (std::find(modes.begin(), modes.end(), a.mode) == modes.end())
    usage_error("--mode " + a.mode + ": expected ddp, nosync, zero1, zero2 or zero3");
  if (a.steps < 1 || a.warmup < 0 || a.threads < 1 || a.batch < 1 || !(a.bucket_mb > 0))
    usage_error("--steps, --threads, --batch >= 1, --warmup >= 0, --bucket-mb > 0");
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The anchor's data: random windows of a text (here the same kind of bytes, fixed seed per
// rank: rank r draws its own batches).
tensor::ByteCorpus corpus() {
  std::string text;
  for (int i = 0; i < 400; ++i)
    text +=
        "This program is free software: you can redistribute it and/or modify it under the "
        "terms of the GNU General Public License as published by the Free Software "
        "Foundation, either version 3 of the License, or any later version. ";
  return tensor::ByteCorpus(std::vector<uint8_t>(text.begin(), text.end()));
}

int run(const Args& a) {
  tensor::set_num_threads(a.threads);
  Communicator world = Communicator::from_env();
  const tensor::ByteCorpus data = corpus();
  const tensor::BatchSampler sampler(data, a.batch, a.cfg.context, 1000 + world.rank());
  tensor::nn::GPT model(a.cfg);
  model.init(0);
  // The trainer's data-parallel side (parallel/replicas.h): the step below is chorus-train's.
  parallel::DeviceMesh mesh(world, {.dp = world.size()},
                            {.placement = parallel::MeshOptions::Placement::kRankOrder});
  parallel::Replicas replicas(
      model, mesh, model.named_parameters(),
      parallel::ReplicasOptions{.zero_stage = a.mode.rfind("zero", 0) == 0 ? a.mode[4] - '0' : 0,
                                .adamw = {.lr = 3e-4, .weight_decay = 0.1},
                                .bucket_bytes = static_cast<size_t>(a.bucket_mb * 1048576.0),
                                .average = true});
  const bool ddp = a.mode == "ddp";

  std::vector<double> step_s;
  double exposed_start = 0;
  for (int s = 0; s < a.warmup + a.steps; ++s) {
    if (s == a.warmup) exposed_start = replicas.reductions().exposed_seconds;
    const auto [x, y] = sampler.batch(s);
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<parallel::Replicas::Quiet> quiet;
    if (a.mode == "nosync") quiet.emplace(replicas.no_sync());
    replicas.accumulate(1, [&](int) {
      Tensor loss = model.loss(x, y, static_cast<uint64_t>(s));
      loss.backward();
      return loss.item();
    });
    quiet.reset();
    replicas.finish_step(0);  // no clipping: the anchor's step
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= a.warmup) step_s.push_back(dt);
  }
  // The slowest rank's time of every step.
  std::vector<double> slowest(step_s.size());
  world.all_reduce(step_s.data(), slowest.data(), step_s.size(), DataType::kF64, ReduceOp::kMax);
  const double med = median(slowest);
  const double tokens = static_cast<double>(world.size() * a.batch * a.cfg.context);

  // The reductions alone: every bucket's all-reduce back to back, as a step issues them.
  double exposed_ms = 0, alone_ms = 0;
  const parallel::Replicas::Reductions reductions = replicas.reductions();
  if (ddp) {
    exposed_ms = 1e3 * (reductions.exposed_seconds - exposed_start) / a.steps;
    std::vector<Tensor> bufs;
    for (const auto& b : reductions.buckets) bufs.push_back(Tensor::zeros({b.numel}, b.dtype));
    std::vector<double> alone;
    for (int r = 0; r < 5 + a.steps; ++r) {
      world.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<Work> works;
      for (Tensor& t : bufs)
        works.push_back(world.all_reduce_async(
            t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), t.dtype(), ReduceOp::kAvg));
      for (Work& w : works) w.wait();
      if (r >= 5)
        alone.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::vector<double> worst(alone.size());
    world.all_reduce(alone.data(), worst.data(), alone.size(), DataType::kF64, ReduceOp::kMax);
    alone_ms = 1e3 * median(worst);
  }
  if (world.rank() == 0) {
    std::ostringstream js;
    js.precision(6);
    js << "{\"system\": \"chorus\", \"mode\": \"" << a.mode << "\", \"ranks\": " << world.size()
       << ", \"threads\": " << a.threads << ", \"layers\": " << a.cfg.layers
       << ", \"width\": " << a.cfg.width << ", \"context\": " << a.cfg.context
       << ", \"batch_per_rank\": " << a.batch << ", \"params\": " << model.num_parameters()
       << ", \"gemm\": \"" << tensor::gemm_backend() << "\", \"step_ms\": " << 1e3 * med
       << ", \"tokens_per_s\": " << tokens / med << ", \"steps\": " << a.steps;
    if (ddp) {
      const double hidden = alone_ms > 0 ? std::clamp(1.0 - exposed_ms / alone_ms, 0.0, 1.0) : 0;
      js << ", \"buckets\": " << reductions.buckets.size() << ", \"exposed_ms\": " << exposed_ms
         << ", \"comm_alone_ms\": " << alone_ms << ", \"hidden\": " << hidden;
    }
    js << "}";
    std::printf("RESULT %s\n", js.str().c_str());
    std::fprintf(stderr, "chorus %s dp=%d: step %.1f ms, %.0f tokens/s%s\n", a.mode.c_str(),
                 world.size(), 1e3 * med, tokens / med,
                 ddp ? (", reductions exposed " + std::to_string(exposed_ms) + " ms of " +
                        std::to_string(alone_ms) + " ms alone")
                           .c_str()
                     : "");
    if (!a.json.empty()) std::ofstream(a.json) << js.str() << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chorus-scaling: %s\n", e.what());
    return 1;
  }
}
