// A GPT trained data parallel with ZeRO (or plain DDP) on a byte-level corpus.
//
//   build/bin/chorus-run -n 4 build/bin/gpt_zero --zero 3
//   build/bin/gpt_zero --zero 0 --steps 20          # one process: the reference
//
// Every step takes a global batch of --batch sequences (BatchSampler: a pure function of seed
// and step); rank r of R trains on rows [r*B/R, (r+1)*B/R) of it, so any number of ranks sees
// the same data per step. Rank 0 prints the mean loss over all ranks, the throughput and, with
// --memory, what each rank holds (ZeroOptimizer::memory()).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "chorus/communicator.h"
#include "chorus/parallel/data_parallel.h"
#include "chorus/parallel/mesh.h"
#include "chorus/parallel/zero.h"
#include "chorus/tensor/amp.h"
#include "chorus/tensor/data.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/optim.h"

namespace {

using namespace chorus;
using tensor::Tensor;

struct Options {
  int zero = 3;
  int steps = 30;
  int64_t batch = 8;
  int64_t context = 64;
  int64_t layers = 4, heads = 4, width = 128;
  double lr = 1e-3;
  std::string data;
  bool checkpointing = false;
  bool bf16 = false;
  bool memory = false;
  int log_every = 10;
};

void usage(FILE* out) {
  std::fprintf(
      out,
      "Usage: gpt_zero [--zero 0|1|2|3] [--steps N] [--batch N] [--context N]\n"
      "                [--layers N] [--heads N] [--width N] [--lr X] [--data FILE]\n"
      "                [--checkpointing] [--bf16] [--memory] [--log-every N]\n"
      "  Trains a GPT on the bytes of FILE (default: a built-in text), data parallel over\n"
      "  every rank of the job with ZeRO stage 1-3 (0: DistributedDataParallel + AdamW).\n"
      "  --batch is the global batch, split evenly over the ranks (default 8).\n"
      "  --checkpointing  recompute each block in backward; --bf16  autocast matmuls.\n"
      "  --memory         print each stage's bytes per rank after the first step.\n");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gpt_zero: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--zero")
        o.zero = std::stoi(value());
      else if (a == "--steps")
        o.steps = std::stoi(value());
      else if (a == "--batch")
        o.batch = std::stoll(value());
      else if (a == "--context")
        o.context = std::stoll(value());
      else if (a == "--layers")
        o.layers = std::stoll(value());
      else if (a == "--heads")
        o.heads = std::stoll(value());
      else if (a == "--width")
        o.width = std::stoll(value());
      else if (a == "--lr")
        o.lr = std::stod(value());
      else if (a == "--data")
        o.data = value();
      else if (a == "--log-every")
        o.log_every = std::stoi(value());
      else if (a == "--checkpointing")
        o.checkpointing = true;
      else if (a == "--bf16")
        o.bf16 = true;
      else if (a == "--memory")
        o.memory = true;
      else if (a == "-h" || a == "--help") {
        usage(stdout);
        std::exit(0);
      } else {
        std::fprintf(stderr, "gpt_zero: unknown option '%s'\n", a.c_str());
        usage(stderr);
        std::exit(2);
      }
    } catch (const std::logic_error&) {
      std::fprintf(stderr, "gpt_zero: %s: not a number\n", a.c_str());
      std::exit(2);
    }
  }
  if (o.zero < 0 || o.zero > 3 || o.steps < 0 || o.batch < 1 || o.log_every < 1) {
    std::fprintf(stderr, "gpt_zero: --zero is 0-3, --steps >= 0, --batch and --log-every >= 1\n");
    std::exit(2);
  }
  return o;
}

tensor::ByteCorpus corpus_of(const std::string& path) {
  if (!path.empty()) return tensor::ByteCorpus::from_file(path);
  std::string text;
  const char* line =
      "It was the best of times, it was the worst of times, it was the age of wisdom, it was "
      "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity. ";
  for (int i = 0; i < 64; ++i) text += line;
  return tensor::ByteCorpus(std::vector<uint8_t>(text.begin(), text.end()));
}

int run(const Options& o) {
  Communicator world = Communicator::from_env();
  parallel::DeviceMesh mesh(world, parallel::MeshShape{.dp = world.size()});
  Communicator& dp = mesh.dp();
  if (o.batch % dp.size() != 0)
    throw InvalidArgument("gpt_zero: --batch " + std::to_string(o.batch) +
                          " does not divide over " + std::to_string(dp.size()) + " ranks");
  const int64_t local = o.batch / dp.size();
  const tensor::ByteCorpus corpus = corpus_of(o.data);
  const tensor::BatchSampler sampler(corpus, o.batch, o.context, 1234);

  tensor::nn::GPT model({.vocab = tensor::ByteCorpus::kVocab,
                         .context = o.context,
                         .layers = o.layers,
                         .heads = o.heads,
                         .width = o.width});
  model.init(42);
  model.set_activation_checkpointing(o.checkpointing);
  const tensor::optim::AdamWOptions adamw{.lr = o.lr, .weight_decay = 0.1};
  std::unique_ptr<parallel::DistributedDataParallel> ddp;
  std::unique_ptr<tensor::optim::AdamW> opt;
  std::unique_ptr<parallel::ZeroOptimizer> zero;
  if (o.zero == 0) {
    ddp = std::make_unique<parallel::DistributedDataParallel>(model, dp);
    opt = std::make_unique<tensor::optim::AdamW>(model.named_parameters(), adamw);
    ddp->attach(*opt);
  } else {
    zero = std::make_unique<parallel::ZeroOptimizer>(
        model, dp, parallel::ZeroOptions{.stage = o.zero, .adamw = adamw});
  }
  if (world.rank() == 0)
    std::printf("gpt_zero: %lld parameters, %s on %d rank%s, global batch %lld x %lld tokens\n",
                static_cast<long long>(model.num_parameters()),
                o.zero == 0 ? "DDP" : ("ZeRO-" + std::to_string(o.zero)).c_str(), dp.size(),
                dp.size() == 1 ? "" : "s", static_cast<long long>(o.batch),
                static_cast<long long>(o.context));

  auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < o.steps; ++step) {
    const auto [x_all, y_all] = sampler.batch(step);
    const Tensor x = x_all.narrow(0, dp.rank() * local, local).contiguous();
    const Tensor y = y_all.narrow(0, dp.rank() * local, local).contiguous();
    double loss_value = 0;
    {
      tensor::AutocastGuard autocast(o.bf16 ? DataType::kBF16 : DataType::kF32);
      Tensor loss = model.loss(x, y, static_cast<uint64_t>(step));
      loss_value = loss.item();
      loss.backward();
    }
    if (zero) {
      zero->step();
      zero->zero_grad();
    } else {
      opt->step();
      opt->zero_grad();
    }
    dp.all_reduce(&loss_value, &loss_value, 1, DataType::kF64, ReduceOp::kAvg);
    if (step == 0 && o.memory && zero) {
      const auto m = zero->memory();
      std::printf(
          "rank %d memory: parameters %.2f MiB, gradients %.2f MiB, optimizer %.2f MiB, "
          "peak %.2f MiB\n",
          world.rank(), m.parameter_bytes / 1048576.0, m.gradient_bytes / 1048576.0,
          m.optimizer_bytes / 1048576.0, m.peak_bytes / 1048576.0);
    }
    if (world.rank() == 0 && ((step + 1) % o.log_every == 0 || step + 1 == o.steps)) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const int done = (step + 1) % o.log_every == 0 ? o.log_every : (step + 1) % o.log_every;
      std::printf("step=%d loss=%.4f tokens/s=%.0f\n", step, loss_value,
                  static_cast<double>(done) * static_cast<double>(o.batch * o.context) / s);
      std::fflush(stdout);
      t0 = std::chrono::steady_clock::now();
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_zero: %s\n", e.what());
    return 1;
  }
}
