// DistributedDataParallel against the one-process reference (training.h), and its behaviour
// with bad input: models that differ, parameters without gradients, a rank that runs out of data.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "chorus/parallel/data_parallel.h"
#include "chorus/tensor/autograd.h"
#include "chorus/tensor/gemm.h"
#include "multiproc.h"
#include "training.h"

namespace chorus::testing {
namespace {

using tensor::Tensor;

// Every process of a run (the reference in this one, the ranks in its forks) computes with the
// pinned kernels, on one thread (the count changes no bit; one keeps the forks from crowding the
// cores).
RunOptions deterministic_env() {
  RunOptions o;
  o.env["CHORUS_DETERMINISTIC"] = "1";
  o.env["CHORUS_TENSOR_THREADS"] = "1";
  return o;
}

void pin_reference_kernels() {
  tensor::set_num_threads(1);
  tensor::pin_gemm_choices();
}

// Runs `scheme` on `dp` ranks and expects every rank to end bit-identical to the reference.
void expect_bit_identical(int dp, const TrainSpec& spec, const Scheme& scheme,
                          RunOptions options = deterministic_env()) {
  pin_reference_kernels();
  const TrainResult ref = reference_run(spec, dp);
  run_ranks(
      dp,
      [&](Communicator& world) {
        const TrainResult got = parallel_run(world, spec, scheme);
        EXPECT_EQ(first_bit_difference(got, ref), "")
            << scheme.name() << " dp=" << dp << " accumulation=" << spec.accumulation << " rank "
            << world.rank();
      },
      options);
}

class DataParallelEquivalence : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(DataParallelEquivalence, BitIdenticalToOneProcess) {
  const auto [dp, accumulation] = GetParam();
  TrainSpec spec;
  spec.accumulation = accumulation;
  expect_bit_identical(dp, spec, Scheme{0});
}

INSTANTIATE_TEST_SUITE_P(Sizes, DataParallelEquivalence,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values(1, 4)),
                         [](const auto& info) {
                           return "dp" + std::to_string(std::get<0>(info.param)) + "_acc" +
                                  std::to_string(std::get<1>(info.param));
                         });

// The averaging reductions (the default): each replica scales by 1 / accumulation and the sum is
// divided by dp once; at a power of two that is the one-process run's mean, bit for bit.
TEST(DataParallel, AveragingEqualsTheOneProcessMeanAtPowersOfTwo) {
  TrainSpec spec;
  spec.average = true;
  spec.accumulation = 4;
  expect_bit_identical(2, spec, Scheme{0});
  spec.accumulation = 1;
  expect_bit_identical(4, spec, Scheme{0});
  spec.accumulation = 4;
  expect_bit_identical(2, spec, Scheme{2});
}

TEST(DataParallel, AutocastBf16AndCheckpointingStayBitIdentical) {
  TrainSpec spec;
  spec.autocast = DataType::kBF16;
  spec.checkpointing = true;
  expect_bit_identical(3, spec, Scheme{0});
}

TEST(DataParallel, DefaultModeMatchesWithinTolerance) {
  // Without the deterministic mode the sums run in the algorithms' orders: equal to rounding.
  TrainSpec spec;
  spec.steps = 20;
  pin_reference_kernels();
  const TrainResult ref = reference_run(spec, 4);
  RunOptions options;
  options.env["CHORUS_TENSOR_THREADS"] = "1";
  options.env["CHORUS_ALGO"] = "ring";  // not rank order: the sums really differ
  run_ranks(
      4,
      [&](Communicator& world) {
        const TrainResult got = parallel_run(world, spec, Scheme{0});
        std::string where;
        EXPECT_LE(max_relative_difference(got, ref, &where), 1e-5) << where;
      },
      options);
}

TEST(DataParallel, DefaultModeBf16MatchesWithinTolerance) {
  TrainSpec spec;
  spec.steps = 10;
  spec.autocast = DataType::kBF16;
  pin_reference_kernels();
  const TrainResult ref = reference_run(spec, 2);
  RunOptions options;
  options.env["CHORUS_TENSOR_THREADS"] = "1";
  options.env["CHORUS_ALGO"] = "ring";
  run_ranks(
      2,
      [&](Communicator& world) {
        const TrainResult got = parallel_run(world, spec, Scheme{0});
        EXPECT_LE(max_relative_difference(got, ref), 1e-4);
      },
      options);
}

TEST(DataParallel, TheCheckCatchesABucketReducedTwice) {
  // The first bucket summed over the ranks before it is averaged: dp times the gradient.
  TrainSpec spec;
  spec.steps = 2;
  pin_reference_kernels();
  const TrainResult ref = reference_run(spec, 3);
  RunOptions options = deterministic_env();
  options.env["CHORUS_PARALLEL_FAULT"] = "ddp_reduce_twice";
  run_ranks(
      3,
      [&](Communicator& world) {
        const TrainResult got = parallel_run(world, spec, Scheme{0});
        EXPECT_NE(first_bit_difference(got, ref), "") << "a doubly reduced bucket went unnoticed";
      },
      options);
}

TEST(DataParallel, BucketsAreLaidOutInReverseAndStartDuringBackward) {
  run_ranks(2, [](Communicator& world) {
    tensor::nn::GPT model({.vocab = 64, .context = 8, .layers = 3, .heads = 2, .width = 16});
    model.init(1);
    parallel::DistributedDataParallel ddp(model, world,
                                          {.bucket_bytes = 8 << 10, .first_bucket_bytes = 2 << 10});
    const auto buckets = ddp.buckets();
    ASSERT_GE(buckets.size(), 4u);
    EXPECT_EQ(buckets[0].params.front(), "ln_f.bias");  // the last registered comes first
    EXPECT_EQ(buckets.back().params.back(), "wte.weight");
    EXPECT_LE(buckets[0].bytes, 2u << 10);
    // Gradients are views into the buckets: two parameters of one bucket share a storage.
    const auto named = model.named_parameters();
    auto grad_of = [&](const std::string& n) {
      for (const auto& [name, p] : named)
        if (name == n) return p.grad();
      return Tensor();
    };
    EXPECT_EQ(grad_of(buckets[1].params[0]).storage(), grad_of(buckets[1].params.back()).storage());
    // When wte's gradient is final (the last of the backward), earlier buckets have started.
    int64_t started_before_last = -1;
    Tensor wte = model.wte->weight;
    const int hook = wte.register_grad_ready_hook(
        [&](Tensor&) { started_before_last = ddp.stats().reductions; });
    const auto [x, y] = micro_batch(TrainSpec{}, 0, world.rank(), 0);
    model.loss(x, y).backward();
    wte.remove_grad_ready_hook(hook);
    EXPECT_GE(started_before_last, static_cast<int64_t>(buckets.size()) - 1);
    EXPECT_EQ(ddp.stats().reductions, static_cast<int64_t>(buckets.size()));
    // The ranks agreed on their kernels.
    const std::string mine = tensor::gemm_backend();
    int64_t h = static_cast<int64_t>(std::hash<std::string>{}(mine + tensor::bf16_gemm_mode()));
    int64_t lo = 0, hi = 0;
    world.all_reduce(&h, &lo, 1, DataType::kI64, ReduceOp::kMin);
    world.all_reduce(&h, &hi, 1, DataType::kI64, ReduceOp::kMax);
    EXPECT_EQ(lo, hi) << "ranks compute with different GEMM backends";
  });
}

TEST(DataParallel, DeterministicModePinsTheKernels) {
  run_ranks(
      2,
      [](Communicator& world) {
        tensor::nn::GPT model({.vocab = 16, .context = 4, .layers = 1, .heads = 1, .width = 8});
        parallel::DistributedDataParallel ddp(model, world);
        EXPECT_EQ(tensor::gemm_backend(), "builtin");
      },
      deterministic_env());
}

TEST(DataParallel, DifferentModelsFailOnEveryRankNamingTheDifference) {
  run_ranks(3, [](Communicator& world) {
    const int64_t width = world.rank() == 2 ? 24 : 16;
    tensor::nn::GPT model({.vocab = 64, .context = 8, .layers = 1, .heads = 2, .width = width});
    try {
      parallel::DistributedDataParallel ddp(model, world);
      ADD_FAILURE() << "different models were wrapped";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'wte.weight' float [64, 16] on rank 0 but 'wte.weight' float [64, 24] "
                          "on rank 2"),
                std::string::npos)
          << what;
    }
  });
}

// y = a(x) + (use_b ? b(x) : 0): b gets no gradient where use_b is false.
class TwoBranches : public tensor::nn::Module {
 public:
  TwoBranches() {
    register_module("a", a, std::make_shared<tensor::nn::Linear>(4, 2));
    register_module("b", b, std::make_shared<tensor::nn::Linear>(4, 2));
  }
  Tensor forward(const Tensor& x, bool use_b) const {
    return hooked([&] {
      Tensor y = a->forward(x);
      return use_b ? tensor::add(y, b->forward(x)) : y;
    });
  }
  std::shared_ptr<tensor::nn::Linear> a, b;
};

TEST(DataParallel, AParameterWithoutGradientIsReportedAndReducedAsZero) {
  run_ranks(2, [](Communicator& world) {
    TwoBranches m;
    m.init(3);
    parallel::DistributedDataParallel ddp(m, world, {.first_bucket_bytes = 32});
    const Tensor x = Tensor::full({1, 4}, 1.0);
    // Rank 0 uses b, rank 1 does not: b's gradient is the mean of (g, 0).
    for (int step = 0; step < 2; ++step) {
      m.zero_grad();
      tensor::sum(m.forward(x, world.rank() == 0)).backward();
    }
    // d(sum)/d(b.weight[o, i]) = x[i] = 1 on rank 0, nothing on rank 1.
    EXPECT_EQ(m.b->weight.grad().to_vector(), std::vector<double>(8, 0.5));
    EXPECT_EQ(m.a->weight.grad().to_vector(), std::vector<double>(8, 1.0));
    const std::vector<std::string> unused = ddp.unused_parameters();
    if (world.rank() == 1) {
      EXPECT_EQ(unused, (std::vector<std::string>{"b.bias", "b.weight"}));
    } else {
      EXPECT_TRUE(unused.empty());
    }
  });
}

TEST(DataParallel, ARankThatRunsOutOfDataFailsEveryRank) {
  // Rank 1 has two batches, rank 0 three: after its last step rank 1 goes on to the trainer's
  // epoch-end loss average while rank 0 is still reducing gradients. Both must learn of it at
  // once (the communicator's mismatch check), not after a timeout, and not hang.
  RunOptions options;
  options.deadline = std::chrono::seconds(60);
  options.env["CHORUS_TIMEOUT"] = "30";
  run_ranks(
      2,
      [](Communicator& world) {
        tensor::nn::GPT model({.vocab = 64, .context = 8, .layers = 1, .heads = 2, .width = 16});
        model.init(2);
        parallel::DistributedDataParallel ddp(model, world);
        const int batches = world.rank() == 1 ? 2 : 3;
        const auto t0 = std::chrono::steady_clock::now();
        try {
          for (int step = 0; step < batches; ++step) {
            const auto [x, y] = micro_batch(TrainSpec{}, step, world.rank(), 0);
            model.zero_grad();
            model.loss(x, y).backward();
          }
          double loss = 1.0, mean = 0;
          world.all_reduce(&loss, &mean, 1, DataType::kF64, ReduceOp::kAvg);
          ADD_FAILURE() << "rank " << world.rank() << " finished although the data was uneven";
        } catch (const Error& e) {
          const std::string what = e.what();
          const std::string other = "rank " + std::to_string(1 - world.rank());
          EXPECT_NE(what.find(other), std::string::npos) << what;
          EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << what;
        }
      },
      options);
}

}  // namespace
}  // namespace chorus::testing
