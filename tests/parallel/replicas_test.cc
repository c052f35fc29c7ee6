// parallel::Replicas, the one interface a trainer holds whatever the stage: its memory report by
// kind and what it refuses. Its step (no_sync, after_backward, finish_step) runs every
// equivalence test against one process through training.cc's parallel_run, and chorus-train's
// runs with experts through tests/train.
#include "chorus/parallel/replicas.h"

#include <gtest/gtest.h>

#include "chorus/error.h"
#include "multiproc.h"
#include "training.h"

namespace chorus::testing {
namespace {

parallel::DeviceMesh make_mesh(Communicator& world) {
  return parallel::DeviceMesh(world, {.dp = world.size(), .tp = 1, .pp = 1},
                              {.placement = parallel::MeshOptions::Placement::kRankOrder});
}

TEST(Replicas, MemoryIsTheStrategysByKind) {
  // After a step at dp 2: DDP holds everything (AdamW's two moments, the gradient buckets, the
  // parameters); ZeRO-1 half the optimizer state, ZeRO-2 half the gradients too.
  const int n = 2;
  run_ranks(n, [&](Communicator& world) {
    parallel::DeviceMesh mesh = make_mesh(world);
    const tensor::nn::GPTConfig cfg{
        .vocab = 256, .context = 8, .layers = 4, .heads = 2, .width = 32};
    for (int stage = 0; stage <= 2; ++stage) {
      tensor::nn::GPT model(cfg);
      model.init(1);
      const int64_t bytes = model.num_parameters() * 4, slack = 16 * 1024;  // padding
      parallel::Replicas replicas(model, mesh, model.named_parameters(),
                                  {.zero_stage = stage, .average = true});
      const auto [x, y] =
          micro_batch(TrainSpec{.model = cfg, .micro_batch = 1}, 0, world.rank(), 0);
      model.loss(x, y).backward();
      replicas.after_backward(true);
      EXPECT_GT(replicas.finish_step(1.0), 0) << "stage " << stage;
      const parallel::Replicas::Memory m = replicas.memory();
      EXPECT_EQ(replicas.scheme(), stage == 0 ? "DDP" : "ZeRO-" + std::to_string(stage));
      EXPECT_NEAR(m.optimizer_bytes, stage == 0 ? 2 * bytes : 2 * bytes / n, slack)
          << "stage " << stage;
      EXPECT_NEAR(m.gradient_bytes, stage == 2 ? bytes / n : bytes, slack) << "stage " << stage;
      EXPECT_NEAR(m.parameter_bytes, bytes, slack) << "stage " << stage;
      EXPECT_GE(m.peak_bytes, m.parameter_bytes);
    }
  });
}

TEST(Replicas, RefusesWhatNoStrategyDoes) {
  run_ranks(1, [](Communicator& world) {
    parallel::DeviceMesh mesh = make_mesh(world);
    tensor::nn::GPT model({.vocab = 16, .context = 4, .layers = 1, .heads = 1, .width = 8});
    model.init(1);
    auto make = [&](parallel::ReplicasOptions o) {
      parallel::Replicas r(model, mesh, model.named_parameters(), std::move(o));
    };
    EXPECT_THROW(make({.zero_stage = 4}), InvalidArgument);
    tensor::GradScaler scaler;
    EXPECT_THROW(make({.zero_stage = 1, .scaler = &scaler}), InvalidArgument);
    EXPECT_THROW(make({.expert_replicas = &world}), InvalidArgument);
  });
}

// Hybrid sharding with the experts apart: each expert over its holders inside one of the rest's
// shard groups. dp 8 at ep 2: the holders of the first experts are dp ranks 0 2 4 6.
TEST(Replicas, ExpertsShardOverTheirHoldersInsideAShardGroup) {
  EXPECT_EQ(parallel::expert_shard_group({0, 2, 4, 6}, 8), 4);  // plain ZeRO: all four
  EXPECT_EQ(parallel::expert_shard_group({1, 3, 5, 7}, 4), 2);  // ep divides G: G / ep
  EXPECT_EQ(parallel::expert_shard_group({0, 2, 4, 6}, 2), 1);  // G divides ep: whole
  EXPECT_EQ(parallel::expert_shard_group({0, 2, 4, 6}, 1), 1);
  EXPECT_EQ(parallel::expert_shard_group({0, 6}, 4), 1);        // dp 12, ep 6, G 4: each alone
  EXPECT_EQ(parallel::expert_shard_group({0, 2, 4}, 3), 0);     // dp 6, ep 2, G 3: 0 2 | 4
  EXPECT_EQ(parallel::expert_shard_group({0, 4, 1, 5}, 2), 0);  // a shard group twice
  EXPECT_EQ(parallel::expert_shard_group({}, 2), 0);
}

}  // namespace
}  // namespace chorus::testing
