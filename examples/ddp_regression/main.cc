// The classic data-parallel example (PyTorch's DDP tutorial): learn y = sum(x) from 4096 random
// 128-wide rows with a 128-256-1 MLP (GELU), MSE loss and AdamW, on every rank of the job.
//
//   build/bin/ddp_regression                       # one process
//   build/bin/chorus-run -n 4 build/bin/ddp_regression
//   torchrun --nproc_per_node 4 build/bin/ddp_regression,  mpirun -n 4 build/bin/ddp_regression
//
// --batch is the global batch: each of R ranks takes batch / R rows per step, dealt by the
// DistributedSampler so that step s of all ranks covers the rows a single process takes in step
// s. So a 1-rank and a 4-rank run with the same flags see the same samples and print the same
// losses (to rounding; bit for bit with CHORUS_DETERMINISTIC=1 where the arithmetic allows).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/parallel/data_parallel.h"
#include "chorus/parallel/mesh.h"
#include "chorus/parallel/sampler.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/optim.h"
#include "chorus/tensor/random.h"
#include "chorus/tensor/serialize.h"

namespace {

using namespace chorus;
using tensor::Tensor;

constexpr int64_t kRows = 4096, kWidth = 128, kHidden = 256;

struct Options {
  int64_t batch = 128;
  int epochs = 3;
  double lr = 1e-3;
  uint64_t seed = 0;
  std::string save = "ddp_regression.ckpt";
};

void usage(FILE* out) {
  std::fprintf(out,
               "Usage: ddp_regression [--batch N] [--epochs N] [--lr X] [--seed N] [--save PATH]\n"
               "  Trains a 128-256-1 MLP to predict the sum of 4096 random 128-wide rows, data\n"
               "  parallel over every rank of the job (chorus-run, torchrun, srun, mpirun, or one\n"
               "  process).\n"
               "  --batch N   global batch, split evenly over the ranks (default 128)\n"
               "  --epochs N  passes over the data (default 3)\n"
               "  --lr X      AdamW learning rate (default 1e-3)\n"
               "  --seed N    data, initialisation and shuffling seed (default 0)\n"
               "  --save PATH rank 0 saves the trained model there (default ddp_regression.ckpt;\n"
               "              empty: do not save)\n"
               "Rank 0 prints 'epoch=E loss=L', L the mean loss of the epoch over all ranks.\n");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "ddp_regression: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--batch")
        o.batch = std::stoll(value());
      else if (a == "--epochs")
        o.epochs = std::stoi(value());
      else if (a == "--lr")
        o.lr = std::stod(value());
      else if (a == "--seed")
        o.seed = std::stoull(value());
      else if (a == "--save")
        o.save = value();
      else if (a == "-h" || a == "--help") {
        usage(stdout);
        std::exit(0);
      } else {
        std::fprintf(stderr, "ddp_regression: unknown option '%s'\n", a.c_str());
        usage(stderr);
        std::exit(2);
      }
    } catch (const std::logic_error&) {
      std::fprintf(stderr, "ddp_regression: %s: not a number\n", a.c_str());
      std::exit(2);
    }
  }
  if (o.batch < 1 || o.epochs < 0 || !(o.lr > 0)) {
    std::fprintf(stderr, "ddp_regression: --batch must be >= 1, --epochs >= 0, --lr > 0\n");
    std::exit(2);
  }
  return o;
}

// x (B, 128) -> fc2(gelu(fc1(x))) (B, 1)
class Regressor : public tensor::nn::Module {
 public:
  Regressor() {
    register_module("fc1", fc1, std::make_shared<tensor::nn::Linear>(kWidth, kHidden));
    register_module("fc2", fc2, std::make_shared<tensor::nn::Linear>(kHidden, 1));
  }
  Tensor forward(const Tensor& x) const {
    return hooked([&] { return fc2->forward(tensor::gelu(fc1->forward(x))); });
  }
  std::shared_ptr<tensor::nn::Linear> fc1, fc2;
};

// Rows `rows` of the data: inputs (B, 128) and targets (B, 1), the row sums.
std::pair<Tensor, Tensor> gather_rows(const std::vector<float>& data,
                                      const std::vector<int64_t>& rows) {
  const auto b = static_cast<int64_t>(rows.size());
  std::vector<float> x(static_cast<size_t>(b * kWidth)), y(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) {
    const float* src = data.data() + rows[static_cast<size_t>(i)] * kWidth;
    std::memcpy(x.data() + i * kWidth, src, kWidth * sizeof(float));
    float s = 0;
    for (int64_t c = 0; c < kWidth; ++c) s += src[c];
    y[static_cast<size_t>(i)] = s;
  }
  return {Tensor::from_vector(std::span<const float>(x), {b, kWidth}),
          Tensor::from_vector(std::span<const float>(y), {b, 1})};
}

int run(const Options& o) {
  Communicator world = Communicator::from_env();
  parallel::DeviceMesh mesh(world, parallel::MeshShape{.dp = world.size()});
  Communicator& dp = mesh.dp();
  if (o.batch % dp.size() != 0)
    throw InvalidArgument("ddp_regression: --batch " + std::to_string(o.batch) +
                          " does not divide over " + std::to_string(dp.size()) + " ranks");
  const int64_t local_batch = o.batch / dp.size();

  // The data: the same on every rank (a pure function of the seed).
  Tensor inputs = Tensor::empty({kRows, kWidth});
  tensor::fill_normal_(inputs, {o.seed, tensor::stream_id("inputs")}, 0.0, 1.0);
  const std::vector<float> data(inputs.data<float>(), inputs.data<float>() + kRows * kWidth);

  Regressor model;
  model.init(o.seed);
  parallel::DistributedDataParallel ddp(model, dp);
  tensor::optim::AdamW opt(model.named_parameters(), {.lr = o.lr});
  ddp.attach(opt);
  parallel::DistributedSampler sampler(kRows, dp, {.seed = o.seed});
  const int64_t steps = sampler.size() / local_batch;  // a last partial batch is dropped
  if (world.rank() == 0)
    std::printf(
        "ddp_regression: %d rank%s, global batch %lld (%lld per rank), %lld steps per "
        "epoch\n",
        dp.size(), dp.size() == 1 ? "" : "s", static_cast<long long>(o.batch),
        static_cast<long long>(local_batch), static_cast<long long>(steps));

  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    sampler.set_epoch(epoch);
    const std::vector<int64_t> mine = sampler.indices();
    double sum = 0;
    for (int64_t s = 0; s < steps; ++s) {
      const std::vector<int64_t> rows(mine.begin() + s * local_batch,
                                      mine.begin() + (s + 1) * local_batch);
      const auto [x, y] = gather_rows(data, rows);
      const Tensor d = tensor::sub(model.forward(x), y);
      Tensor loss = tensor::mean(tensor::mul(d, d));
      sum += loss.item();
      loss.backward();
      opt.step();
      opt.zero_grad();
    }
    double mean = steps > 0 ? sum / static_cast<double>(steps) : 0.0;
    dp.all_reduce(&mean, &mean, 1, DataType::kF64, ReduceOp::kAvg);
    if (world.rank() == 0) std::printf("epoch=%d loss=%.6f\n", epoch, mean);
    std::fflush(stdout);
  }
  if (world.rank() == 0 && !o.save.empty()) {
    tensor::save_tensors(o.save, model.state_dict());
    std::printf("saved %s\n", o.save.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_regression: %s\n", e.what());
    return 1;
  }
}
