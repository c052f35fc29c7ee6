// Pipeline parallelism: the schedules and their validator on paper, the layer cut, and the
// engine on real ranks against the one-process run (bit for bit in the deterministic mode).
#include <gtest/gtest.h>

#include <cmath>

#include "chorus/parallel/pipeline.h"
#include "chorus/tensor/gemm.h"
#include "multiproc.h"
#include "training.h"

namespace chorus::testing {
namespace {

using parallel::PipelineAction;
using parallel::PipelineOp;
using parallel::PipelineSchedule;

std::string error_of(const PipelineSchedule& s) {
  try {
    parallel::validate(s);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineSchedule, EveryScheduleValidatesWithTheTextbookBubble) {
  for (int p : {1, 2, 3, 4})
    for (int m : {p, 2 * p, 4 * p}) {
      for (const char* name : {"gpipe", "1f1b"}) {
        const PipelineSchedule s = parallel::make_schedule(name, p, 1, m);
        const parallel::PipelineSimulation sim = parallel::validate(s);
        // Uniform forwards and backwards: the simulated bubble is the formula's exactly.
        EXPECT_NEAR(sim.bubble, parallel::predicted_bubble(s), 1e-12)
            << name << " p=" << p << " m=" << m;
        EXPECT_NEAR(sim.bubble, double(p - 1) / (m + p - 1), 1e-12);
        for (int st = 0; st < p; ++st) {
          // GPipe keeps every micro-batch's activations; 1F1B at most p - s.
          const int expect = std::string(name) == "gpipe" ? m : std::min(p - st, m);
          EXPECT_EQ(sim.peak_activations[static_cast<size_t>(st)], expect)
              << name << " stage " << st;
        }
      }
      for (int v : {2, 3}) {
        if (p == 1) continue;  // interleaving needs two stages
        const PipelineSchedule s = parallel::interleaved(p, v, m);
        const parallel::PipelineSimulation sim = parallel::validate(s);
        // Interleaving divides the bubble by the chunks (to within the warm-up's rounding).
        EXPECT_NEAR(sim.bubble, parallel::predicted_bubble(s), 0.03)
            << "interleaved p=" << p << " v=" << v << " m=" << m;
        EXPECT_LE(sim.bubble, double(p - 1) / (m + p - 1) + 1e-12);
      }
    }
}

TEST(PipelineSchedule, TheValidatorRejectsBrokenSchedules) {
  // A missing receive.
  PipelineSchedule s = parallel::one_f_one_b(2, 4);
  auto& stage1 = s.actions[1];
  stage1.erase(
      std::find(stage1.begin(), stage1.end(), PipelineAction{PipelineOp::kRecvActivation, 2, 0}));
  EXPECT_NE(error_of(s).find("runs before its input is received"), std::string::npos)
      << error_of(s);
  // A micro-batch swapped: stage 0 sends micro-batch 1's activation as micro-batch 0's.
  s = parallel::gpipe(2, 2);
  for (PipelineAction& a : s.actions[0])
    if (a.op == PipelineOp::kSendActivation) a.micro = 1 - a.micro;
  EXPECT_NE(error_of(s), "");
  // A backward before its forward.
  s = parallel::gpipe(1, 2);
  std::swap(s.actions[0][0], s.actions[0][2]);
  EXPECT_NE(error_of(s).find("before its forward"), std::string::npos) << error_of(s);
  // Stage 0 holds micro-batch 1's forward back until micro-batch 0's backward, which needs stage
  // 1's backward, which stage 1 runs only after micro-batch 1's forward: a deadlock, both named.
  s = parallel::gpipe(2, 2, /*tied_embedding=*/false);
  s.actions[0] = {{PipelineOp::kForward, 0, 0},  {PipelineOp::kSendActivation, 0, 0},
                  {PipelineOp::kRecvGrad, 0, 0}, {PipelineOp::kBackward, 0, 0},
                  {PipelineOp::kForward, 1, 0},  {PipelineOp::kSendActivation, 1, 0},
                  {PipelineOp::kRecvGrad, 1, 0}, {PipelineOp::kBackward, 1, 0}};
  s.actions[1] = {{PipelineOp::kRecvActivation, 0, 0}, {PipelineOp::kRecvActivation, 1, 0},
                  {PipelineOp::kForward, 0, 0},        {PipelineOp::kForward, 1, 0},
                  {PipelineOp::kBackward, 0, 0},       {PipelineOp::kSendGrad, 0, 0},
                  {PipelineOp::kBackward, 1, 0},       {PipelineOp::kSendGrad, 1, 0}};
  const std::string dead = error_of(s);
  EXPECT_NE(dead.find("deadlocks"), std::string::npos) << dead;
  EXPECT_NE(dead.find("stage 0"), std::string::npos) << dead;
  EXPECT_NE(dead.find("stage 1"), std::string::npos) << dead;
  // A send without its receive.
  s = parallel::one_f_one_b(2, 2);
  s.actions[0].push_back({PipelineOp::kSendActivation, 1, 0});
  EXPECT_NE(error_of(s), "");
  // Sizes.
  EXPECT_THROW(parallel::one_f_one_b(4, 3), InvalidArgument);     // m < p
  EXPECT_THROW(parallel::interleaved(2, 2, 3), InvalidArgument);  // m % p != 0
  EXPECT_THROW(parallel::interleaved(1, 2, 4), InvalidArgument);  // one stage
  EXPECT_THROW(parallel::make_schedule("1f1b", 2, 2, 4), InvalidArgument);
  EXPECT_THROW(parallel::make_schedule("zb", 2, 1, 4), InvalidArgument);
}

TEST(PipelineSchedule, PicturesShowEveryStage) {
  const PipelineSchedule s = parallel::one_f_one_b(3, 6);
  const parallel::PipelineSimulation sim = parallel::validate(s);
  const std::string text = parallel::timeline_text(s, sim);
  EXPECT_NE(text.find("stage 0: F0 F1 F2"), std::string::npos) << text;
  EXPECT_NE(text.find("stage 2: . . F0 B0"), std::string::npos) << text;
  const std::string svg = parallel::timeline_svg(s, sim);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("stage 2"), std::string::npos);
}

TEST(PipelineBalance, CutsByCost) {
  // Equal blocks: an even cut; the embedding and head count with the first and last stages.
  EXPECT_EQ(parallel::balance_layers({0, 1, 1, 1, 1, 1, 1, 0}, 3),
            (std::vector<int64_t>{0, 2, 4, 6}));
  // An expensive head leaves the last stage fewer blocks.
  EXPECT_EQ(parallel::balance_layers({0, 1, 1, 1, 1, 1, 1, 4}, 2), (std::vector<int64_t>{0, 5, 6}));
  EXPECT_EQ(parallel::balance_layers({4, 1, 1, 1, 1, 1, 1, 0}, 2), (std::vector<int64_t>{0, 1, 6}));
  try {
    parallel::balance_layers({0, 1, 1, 0}, 3);
    ADD_FAILURE() << "2 layers cut into 3 stages";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("2 layers for 3 stages"), std::string::npos) << e.what();
  }
}

RunOptions deterministic_env() {
  RunOptions o;
  o.env["CHORUS_DETERMINISTIC"] = "1";
  o.env["CHORUS_TENSOR_THREADS"] = "1";
  return o;
}

void expect_pipeline_bit_identical(int world, const TrainSpec& spec, const Scheme& scheme) {
  tensor::set_num_threads(1);
  tensor::pin_gemm_choices();
  const int dp = world / (scheme.pp * scheme.tp);
  const TrainResult ref = reference_run(spec, dp);
  run_ranks(
      world,
      [&](Communicator& w) {
        const TrainResult got = parallel_run(w, spec, scheme);
        EXPECT_EQ(first_bit_difference(got, ref), "")
            << scheme.name() << " m=" << spec.accumulation << " on " << world << " ranks, rank "
            << w.rank();
      },
      deterministic_env());
}

class PipelineEquivalence : public ::testing::TestWithParam<std::tuple<std::string, int, int>> {};

TEST_P(PipelineEquivalence, BitIdenticalToOneProcess) {
  const auto [schedule, pp, m_per_stage] = GetParam();
  TrainSpec spec;
  spec.model = {.vocab = 64, .context = 8, .layers = 8, .heads = 2, .width = 16};
  spec.steps = 3;
  spec.accumulation = pp * m_per_stage;  // micro-batches per step
  expect_pipeline_bit_identical(
      pp, spec,
      Scheme{.pp = pp, .schedule = schedule, .chunks = schedule == "interleaved" ? 2 : 1});
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineEquivalence,
                         ::testing::Combine(::testing::Values("gpipe", "1f1b", "interleaved"),
                                            ::testing::Values(2, 4), ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_pp" +
                                  std::to_string(std::get<1>(info.param)) + "_m" +
                                  std::to_string(std::get<1>(info.param) * std::get<2>(info.param));
                         });

TEST(Pipeline, DataParallelPipelinesStayBitIdentical) {
  // 2 x 1 x 2: two replicas of a two-stage pipeline, DDP and ZeRO-1 over dp.
  TrainSpec spec;
  spec.model = {.vocab = 64, .context = 8, .layers = 4, .heads = 2, .width = 16};
  spec.steps = 3;
  spec.accumulation = 4;
  expect_pipeline_bit_identical(4, spec, Scheme{.pp = 2});
  expect_pipeline_bit_identical(4, spec, Scheme{.zero_stage = 1, .pp = 2});
}

TEST(Pipeline, MixedMeshesOnEightRanksMatchOneProcess) {
  // 2x2x1, 1x2x2, 2x1x2, 2x2x2 (dp x tp x pp): tensor parallelism within 1e-5 per step.
  TrainSpec spec;
  spec.model = {.vocab = 64, .context = 8, .layers = 4, .heads = 2, .width = 16};
  spec.steps = 20;
  spec.accumulation = 4;
  tensor::set_num_threads(1);
  tensor::pin_gemm_choices();
  struct Mesh {
    int dp, tp, pp;
  };
  for (const Mesh& m : {Mesh{2, 2, 1}, Mesh{1, 2, 2}, Mesh{2, 1, 2}, Mesh{2, 2, 2}}) {
    const TrainResult ref = reference_run(spec, m.dp);
    RunOptions options;
    options.env["CHORUS_TENSOR_THREADS"] = "1";
    run_ranks(
        m.dp * m.tp * m.pp,
        [&](Communicator& w) {
          const TrainResult got = parallel_run(w, spec, Scheme{.tp = m.tp, .pp = m.pp});
          std::string where;
          EXPECT_LE(max_relative_difference(got, ref, &where), 1e-5)
              << m.dp << "x" << m.tp << "x" << m.pp << ": " << where;
        },
        options);
  }
}

TEST(Pipeline, TheEngineKeepsTheActivationsTheValidatorPredicts) {
  for (const char* schedule : {"gpipe", "1f1b"}) {
    run_ranks(3, [schedule](Communicator& world) {
      parallel::DeviceMesh mesh(world, {.pp = 3},
                                {.placement = parallel::MeshOptions::Placement::kRankOrder});
      tensor::nn::GPT model({.vocab = 32, .context = 4, .layers = 3, .heads = 1, .width = 8});
      model.init(1);
      parallel::PipelineEngine engine(
          model, mesh, {.schedule = schedule, .micro_batches = 6, .balance = "uniform"});
      const parallel::PipelineSimulation sim = parallel::validate(engine.schedule());
      const TrainSpec spec{.model = model.config(), .micro_batch = 1};
      const double loss =
          engine.forward_backward([&](int m) { return micro_batch(spec, 0, 0, m); });
      EXPECT_GT(loss, 0.0);
      EXPECT_EQ(engine.stats().peak_activations,
                sim.peak_activations[static_cast<size_t>(world.rank())])
          << schedule << " stage " << world.rank();
      EXPECT_EQ(engine.boundaries(), (std::vector<int64_t>{0, 1, 2, 3}));
      // Parameters of the other stages are released: touching one fails, it does not read.
      const std::string other = "h." + std::to_string((world.rank() + 1) % 3) + ".mlp.c_fc.weight";
      for (auto& [name, t] : model.named_parameters())
        if (name == other) {
          EXPECT_THROW(t.to_vector(), InvalidArgument);
        }
    });
  }
}

TEST(Pipeline, RefusesWhatTheModelCannotBeCutInto) {
  run_ranks(2, [](Communicator& world) {
    parallel::DeviceMesh mesh(world, {.pp = 2},
                              {.placement = parallel::MeshOptions::Placement::kRankOrder});
    tensor::nn::GPT model({.vocab = 16, .context = 4, .layers = 3, .heads = 1, .width = 8});
    try {
      parallel::PipelineEngine e(model, mesh,
                                 {.schedule = "interleaved", .chunks = 2, .micro_batches = 2});
      ADD_FAILURE() << "3 layers cut into 4 virtual stages";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("3 layers for 4 virtual stages"), std::string::npos)
          << e.what();
    }
    try {
      parallel::PipelineEngine e(model, mesh, {.micro_batches = 1});
      ADD_FAILURE() << "1 micro-batch for 2 stages";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("1 micro-batches for 2 stages"), std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace chorus::testing
