// ZeroOptimizer, stages 1-3, against the one-process reference (training.h); its shard layout,
// its memory per rank, and the release of stage 3's parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>

#include "chorus/parallel/data_parallel.h"
#include "chorus/parallel/zero.h"
#include "chorus/tensor/gemm.h"
#include "multiproc.h"
#include "training.h"

namespace chorus::testing {
namespace {

using tensor::Tensor;

RunOptions deterministic_env() {
  RunOptions o;
  o.env["CHORUS_DETERMINISTIC"] = "1";
  o.env["CHORUS_TENSOR_THREADS"] = "1";
  return o;
}

void expect_bit_identical(int dp, const TrainSpec& spec, const Scheme& scheme,
                          RunOptions options = deterministic_env()) {
  tensor::set_num_threads(1);
  tensor::pin_gemm_choices();
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

class ZeroEquivalence : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(ZeroEquivalence, BitIdenticalToOneProcess) {
  const auto [stage, dp, accumulation] = GetParam();
  TrainSpec spec;
  spec.accumulation = accumulation;
  expect_bit_identical(dp, spec, Scheme{stage});
}

INSTANTIATE_TEST_SUITE_P(Sizes, ZeroEquivalence,
                         ::testing::Combine(::testing::Values(1, 2, 3),
                                            ::testing::Values(1, 2, 3, 4), ::testing::Values(1, 4)),
                         [](const auto& info) {
                           return "stage" + std::to_string(std::get<0>(info.param)) + "_dp" +
                                  std::to_string(std::get<1>(info.param)) + "_acc" +
                                  std::to_string(std::get<2>(info.param));
                         });

TEST(Zero, Stage3WithCheckpointingAndAutocastStaysBitIdentical) {
  TrainSpec spec;
  spec.autocast = DataType::kBF16;
  spec.checkpointing = true;
  spec.accumulation = 2;
  for (int stage : {2, 3}) expect_bit_identical(3, spec, Scheme{stage});
}

TEST(Zero, SixteenBitParametersKeepF32MasterShards) {
  TrainSpec spec;
  spec.param_dtype = DataType::kBF16;
  spec.steps = 3;
  for (int stage : {1, 2, 3}) expect_bit_identical(2, spec, Scheme{stage});
}

TEST(Zero, TheCheckCatchesAShardShiftedByOne) {
  TrainSpec spec;
  spec.steps = 2;
  tensor::set_num_threads(1);
  tensor::pin_gemm_choices();
  for (int stage : {1, 3}) {
    const Scheme scheme{stage};
    const TrainResult ref = reference_run(spec, 2);
    RunOptions options = deterministic_env();
    options.env["CHORUS_PARALLEL_FAULT"] = "zero_shard_shift";
    run_ranks(
        2,
        [&](Communicator& world) {
          const TrainResult got = parallel_run(world, spec, scheme);
          EXPECT_NE(first_bit_difference(got, ref), "") << "a shifted shard went unnoticed";
        },
        options);
  }
}

TEST(Zero, DefaultModeMatchesWithinTolerance) {
  TrainSpec spec;
  spec.steps = 20;
  tensor::set_num_threads(1);
  tensor::pin_gemm_choices();
  RunOptions options;
  options.env["CHORUS_TENSOR_THREADS"] = "1";
  options.env["CHORUS_ALGO"] = "ring";
  for (int stage : {1, 3}) {
    const TrainResult ref = reference_run(spec, 4);
    run_ranks(
        4,
        [&](Communicator& world) {
          const TrainResult got = parallel_run(world, spec, Scheme{stage});
          EXPECT_LE(max_relative_difference(got, ref), 1e-5) << "stage " << stage;
        },
        options);
  }
}

TEST(Zero, ClipGradNormIsTheOneProcessNormBitForBit) {
  // The norm is exact (squares added as integers): per shard and over ranks it is one process's
  // norm to the bit, and so is every clipped step. dp 3: shards cut the parameters unevenly.
  TrainSpec spec;
  spec.clip = 0.05;  // below the gradients' norm: every step clips
  spec.steps = 3;
  spec.accumulation = 2;
  tensor::set_num_threads(1);
  tensor::pin_gemm_choices();
  const TrainResult ref = reference_run(spec, 3);
  ASSERT_GT(ref.norms.front(), spec.clip);
  for (int stage : {0, 1, 2, 3}) {
    run_ranks(
        3,
        [&](Communicator& world) {
          const TrainResult got = parallel_run(world, spec, Scheme{stage});
          EXPECT_EQ(got.norms, ref.norms) << "stage " << stage;
          EXPECT_EQ(first_bit_difference(got, ref), "") << "stage " << stage;
        },
        deterministic_env());
  }
}

TEST(Zero, ShardsCoverEveryParameterOnce) {
  run_ranks(3, [](Communicator& world) {
    for (int stage : {1, 2, 3}) {
      tensor::nn::GPT model({.vocab = 50, .context = 8, .layers = 2, .heads = 2, .width = 12});
      model.init(1);
      parallel::ZeroOptimizer zero(
          model, world, {.stage = stage, .bucket_bytes = 4096, .first_bucket_bytes = 1024});
      for (const auto& g : zero.groups()) {
        EXPECT_EQ(g.numel % 3, 0) << g.name;
        EXPECT_EQ(g.shard_end - g.shard_begin, g.numel / 3) << g.name;
      }
      if (stage == 3) {
        const auto groups = zero.groups();
        ASSERT_EQ(groups.size(), 3u);  // h.1, h.0, then the root
        EXPECT_EQ(groups[0].name, "h.1");
        EXPECT_EQ(groups[1].name, "h.0");
        EXPECT_EQ(groups[2].name, "");
      }
      // Every element of every parameter is owned by exactly one rank.
      for (const auto& s : zero.shard_layout()) {
        std::vector<int64_t> mine{s.owned_begin, s.owned_end}, all(6);
        world.all_gather(mine.data(), all.data(), 2, DataType::kI64);
        std::vector<std::pair<int64_t, int64_t>> ranges;
        for (int r = 0; r < 3; ++r)
          if (all[2 * r] < all[2 * r + 1]) ranges.emplace_back(all[2 * r], all[2 * r + 1]);
        std::sort(ranges.begin(), ranges.end());
        int64_t covered = 0;
        for (const auto& [b, e] : ranges) {
          EXPECT_EQ(b, covered) << s.name << " stage " << stage;
          covered = e;
        }
        EXPECT_EQ(covered, s.numel) << s.name << " stage " << stage;
      }
    }
  });
}

TEST(Zero, Stage3KeepsOnlyShardsBetweenSteps) {
  run_ranks(2, [](Communicator& world) {
    tensor::nn::GPT model({.vocab = 64, .context = 8, .layers = 2, .heads = 2, .width = 16});
    model.init(1);
    const int64_t full = model.num_parameters() * 4;
    parallel::ZeroOptimizer zero(model, world, {.stage = 3});
    EXPECT_THROW(model.h[0]->mlp->c_fc->weight.to_vector(), InvalidArgument);  // released
    EXPECT_LE(zero.memory().parameter_bytes, full / 2 + 4096);
    const auto [x, y] = micro_batch(TrainSpec{}, 0, world.rank(), 0);
    model.loss(x, y).backward();
    zero.step();
    zero.zero_grad();
    EXPECT_THROW(model.h[1]->attn->c_attn->weight.to_vector(), InvalidArgument);
    EXPECT_THROW(model.wte->weight.to_vector(), InvalidArgument);  // the root too, after backward
    EXPECT_LE(zero.memory().parameter_bytes, full / 2 + 4096);
    // state_dict gathers them (and releases them again).
    const auto state = zero.state_dict();
    EXPECT_EQ(state.size(), model.named_parameters().size());
    EXPECT_THROW(model.wte->weight.to_vector(), InvalidArgument);
  });
}

TEST(Zero, MemoryPerRankFollowsTheStage) {
  // Persistent bytes per rank after a step, against the unsharded run: optimizer state (AdamW's
  // two moments) / N from stage 1, gradients / N from stage 2, parameters / N at stage 3. The
  // engine's peak over a step (above what the model held before wrapping) falls stage by stage.
  const int n = 4;
  run_ranks(n, [&](Communicator& world) {
    // Many small units, as real models have: a unit's transient (gathered, prefetched, its
    // gradients in flight) is then small beside what sharding saves.
    const tensor::nn::GPTConfig cfg{
        .vocab = 256, .context = 8, .layers = 12, .heads = 2, .width = 32};
    int64_t peak[4] = {};
    int64_t elements = 0;
    for (int stage = 0; stage <= 3; ++stage) {
      tensor::nn::GPT model(cfg);
      model.init(1);
      elements = model.num_parameters();
      const int64_t bytes = elements * 4, slack = 64 * 1024;  // padding and alignment
      const auto [x, y] =
          micro_batch(TrainSpec{.model = cfg, .micro_batch = 1}, 0, world.rank(), 0);
      tensor::reset_peak_memory();
      const int64_t base = tensor::memory_stats().current_bytes;
      if (stage == 0) {
        parallel::DistributedDataParallel ddp(model, world);
        tensor::optim::AdamW opt(model.named_parameters(), {});
        model.loss(x, y).backward();
        opt.step();
        peak[0] = tensor::memory_stats().peak_bytes - base;
        continue;
      }
      parallel::ZeroOptimizer zero(
          model, world, {.stage = stage, .bucket_bytes = 64 << 10, .first_bucket_bytes = 16 << 10});
      model.loss(x, y).backward();
      zero.step();
      const auto m = zero.memory();
      peak[stage] = tensor::memory_stats().peak_bytes - base;
      EXPECT_NEAR(m.optimizer_bytes, 2 * bytes / n, slack) << "stage " << stage;
      EXPECT_NEAR(m.gradient_bytes, stage >= 2 ? bytes / n : bytes, slack) << "stage " << stage;
      EXPECT_NEAR(m.parameter_bytes, stage == 3 ? bytes / n : bytes, slack) << "stage " << stage;
    }
    EXPECT_LT(peak[1], peak[0]);
    EXPECT_LT(peak[2], peak[1]);
    EXPECT_LT(peak[3], peak[2]);
  });
}

// Hybrid sharding: dp 4 in shard groups of 2 (and 1), every stage, against the same one-process
// run as plain ZeRO and DDP (the check above proves those equal it): the cross-group reduction
// must fold the four ranks' contributions in dp rank order. With clipping (the norm sums over
// the shard group only) and accumulation (stage 1 folds onto dp rank 0 under no_sync()).
TEST(ZeroHybrid, BitIdenticalToOneProcessAtEveryStage) {
  TrainSpec spec;
  spec.steps = 3;
  spec.accumulation = 2;
  spec.clip = 0.05;
  tensor::set_num_threads(1);
  tensor::pin_gemm_choices();
  const TrainResult ref = reference_run(spec, 4);
  TrainSpec averaged = spec;
  averaged.average = true;  // exact at dp 4: the fold divided by 4
  run_ranks(
      4,
      [&](Communicator& world) {
        for (int group : {2, 1})
          for (int stage : {1, 2, 3}) {
            const Scheme scheme{.zero_stage = stage, .zero_group = group};
            EXPECT_EQ(first_bit_difference(parallel_run(world, spec, scheme), ref), "")
                << scheme.name() << " rank " << world.rank();
          }
        for (int stage : {1, 2}) {
          const Scheme scheme{.zero_stage = stage, .zero_group = 2};
          EXPECT_EQ(first_bit_difference(parallel_run(world, averaged, scheme), ref), "")
              << scheme.name() << " averaging, rank " << world.rank();
        }
      },
      deterministic_env());
}

// A shard reduced across groups with the wrong ranks (shard i of group 1 meeting shard i + 1 of
// group 0: CHORUS_PARALLEL_FAULT=zero_wrong_group) is caught, by the bit check in the
// deterministic mode (stages 2-3 fold by an all-to-all over dp) and by the tolerance of the
// default mode (a reduce-scatter in the group, then an all-reduce over the replica group), which
// the right groups meet.
TEST(ZeroHybrid, AShardReducedOverTheWrongGroupIsCaught) {
  TrainSpec spec;
  spec.steps = 3;
  tensor::set_num_threads(1);
  tensor::pin_gemm_choices();
  const TrainResult ref = reference_run(spec, 4);
  RunOptions faulty = deterministic_env();
  faulty.env["CHORUS_PARALLEL_FAULT"] = "zero_wrong_group";
  run_ranks(
      4,
      [&](Communicator& world) {
        for (int stage : {2, 3})
          EXPECT_NE(
              first_bit_difference(
                  parallel_run(world, spec, Scheme{.zero_stage = stage, .zero_group = 2}), ref),
              "")
              << "stage " << stage << ": a shard folded from the wrong group went unnoticed";
      },
      faulty);
  RunOptions plain;
  plain.env["CHORUS_TENSOR_THREADS"] = "1";
  RunOptions plain_faulty = plain;
  plain_faulty.env["CHORUS_PARALLEL_FAULT"] = "zero_wrong_group";
  for (const RunOptions* options : {&plain, &plain_faulty}) {
    const bool fault = options == &plain_faulty;
    run_ranks(
        4,
        [&](Communicator& world) {
          for (int stage : {1, 2, 3}) {
            const double d = max_relative_difference(
                parallel_run(world, spec, Scheme{.zero_stage = stage, .zero_group = 2}), ref);
            if (fault)
              EXPECT_GT(d, 1e-3) << "stage " << stage << ": the wrong replica group went unnoticed";
            else
              EXPECT_LE(d, 1e-5) << "stage " << stage;
          }
        },
        *options);
  }
}

TEST(ZeroHybrid, GroupsAreConsecutiveDpRanksAndBadSizesAreRefused) {
  run_ranks(4, [](Communicator& world) {
    tensor::nn::GPT model({.vocab = 50, .context = 8, .layers = 2, .heads = 2, .width = 12});
    model.init(1);
    for (int stage : {1, 2}) {
      parallel::ZeroOptimizer zero(model, world, {.stage = stage, .shard_group = 2});
      EXPECT_EQ(zero.shard_group_size(), 2);
      EXPECT_EQ(zero.replica(), world.rank() / 2);
      for (const auto& g : zero.groups()) {
        EXPECT_EQ(g.numel % 2, 0) << g.name;
        EXPECT_EQ(g.shard_end - g.shard_begin, g.numel / 2) << g.name;
        EXPECT_EQ(g.shard_begin, g.numel / 2 * (world.rank() % 2)) << g.name;
      }
    }
    // On one machine the host is every rank: plain ZeRO.
    {
      parallel::ZeroOptimizer zero(model, world,
                                   {.shard_group = parallel::ZeroOptions::kHostGroup});
      EXPECT_EQ(zero.shard_group_size(), 4);
      EXPECT_EQ(zero.replica(), 0);
    }
    for (int bad : {3, 8, -2}) {
      try {
        parallel::ZeroOptimizer zero(model, world, {.shard_group = bad});
        ADD_FAILURE() << "shard_group " << bad << " accepted at dp 4";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("shard_group"), std::string::npos) << e.what();
      }
    }
  });
}

// kHostGroup groups the dp ranks by the bootstrap's host identity: two "hosts" of two ranks on
// this machine (CHORUS_HOST_ID; the ranks of different hosts talk over UCX) make groups of two,
// which train to the one-process bits; hosts that alternate along dp are refused by name.
TEST(ZeroHybrid, HostGroupsFollowTheHostIdentity) {
  if (!CHORUS_TEST_MULTIHOST) GTEST_SKIP() << "this build connects ranks of one host only";
  TrainSpec spec;
  spec.steps = 2;
  tensor::set_num_threads(1);
  tensor::pin_gemm_choices();
  const TrainResult ref = reference_run(spec, 4);
  for (const bool alternate : {false, true}) {
    RunOptions options = deterministic_env();
    options.before_connect = [alternate](int rank) {
      const int host = alternate ? rank % 2 : rank / 2;
      ::setenv("CHORUS_HOST_ID", ("zero-host-" + std::to_string(host)).c_str(), 1);
    };
    run_ranks(
        4,
        [&](Communicator& world) {
          if (alternate) {
            try {
              parallel::host_shard_group(world);
              ADD_FAILURE() << "hosts alternating along dp accepted";
            } catch (const InvalidArgument& e) {
              EXPECT_NE(std::string(e.what()).find("not consecutive (the host of each dp rank: 0 "
                                                   "1 0 1)"),
                        std::string::npos)
                  << e.what();
            }
            return;
          }
          EXPECT_EQ(parallel::host_shard_group(world), 2);
          const Scheme scheme{.zero_stage = 3, .zero_group = parallel::ZeroOptions::kHostGroup};
          EXPECT_EQ(first_bit_difference(parallel_run(world, spec, scheme), ref), "");
        },
        options);
  }
}

TEST(ZeroHybrid, MemoryPerRankFollowsTheShardGroup) {
  // dp 4 in groups of 2: every sharded state takes bytes / 2 per rank (not / 4), as the formula
  // says with N the group's size; and what ZeRO reports is what the engine holds after a step.
  const int n = 2;
  run_ranks(4, [&](Communicator& world) {
    const tensor::nn::GPTConfig cfg{
        .vocab = 256, .context = 8, .layers = 12, .heads = 2, .width = 32};
    for (int stage = 1; stage <= 3; ++stage) {
      const auto [x, y] =
          micro_batch(TrainSpec{.model = cfg, .micro_batch = 1}, 0, world.rank(), 0);
      const int64_t base = tensor::memory_stats().current_bytes;
      tensor::nn::GPT model(cfg);
      model.init(1);
      const int64_t bytes = model.num_parameters() * 4, slack = 64 * 1024;
      parallel::ZeroOptimizer zero(model, world,
                                   {.stage = stage,
                                    .bucket_bytes = 64 << 10,
                                    .first_bucket_bytes = 16 << 10,
                                    .shard_group = n});
      model.loss(x, y).backward();
      zero.step();
      const auto m = zero.memory();
      EXPECT_NEAR(m.optimizer_bytes, 2 * bytes / n, slack) << "stage " << stage;
      EXPECT_NEAR(m.gradient_bytes, stage >= 2 ? bytes / n : bytes, slack) << "stage " << stage;
      EXPECT_NEAR(m.parameter_bytes, stage == 3 ? bytes / n : bytes, slack) << "stage " << stage;
      EXPECT_NEAR(tensor::memory_stats().current_bytes - base,
                  m.parameter_bytes + m.gradient_bytes + m.optimizer_bytes, slack)
          << "stage " << stage << ": the engine holds other bytes than ZeRO reports";
    }
  });
}

}  // namespace
}  // namespace chorus::testing
