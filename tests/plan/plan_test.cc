// chorus-plan's formulas against values computed by hand, and its clear errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cerrno>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <string>

#include "chart.h"
#include "collectives.h"
#include "error.h"
#include "local_probe.h"
#include "memory.h"
#include "mesh.h"
#include "model.h"
#include "options.h"
#include "plan.h"
#include "report.h"
#include "run_command.h"
#include "step_time.h"

namespace chorus::plan {
namespace {

// The tiny model the memory test trains.
ModelShape tiny() {
  ModelShape m;
  m.layers = 4;
  m.width = 64;
  m.heads = 4;
  m.context = 32;
  m.vocab = 256;
  return m;
}

TEST(PlanFormulas, ParameterCountsOfGpt2) {
  // 12 layers x (12 C^2 + 13 C) + V C + T C + 2 C with C = 768, T = 1024.
  ModelShape m = model_preset("gpt2-124m");
  EXPECT_EQ(parameter_count(m), 124439808);
  m.vocab = 50304;
  EXPECT_EQ(parameter_count(m), 124475904);
  EXPECT_EQ(parameter_count(model_preset("gpt2-1.5b")), 1557611200);
}

TEST(PlanFormulas, WhatARankOfATensorOrPipelineSplitHolds) {
  const ModelShape m = tiny();
  // tp 2: blocks' matrices and column biases halved, row biases and LayerNorms whole:
  // 4 x (6 * 64^2 + 7 * 64 / 2 + 6 * 64) + 256 * 64 / 2 + 32 * 64 + 2 * 64.
  EXPECT_EQ(rank_parameters(m, 2, 4, true, true, false).trained, 111104);
  // pp 2: the first stage two blocks and the embeddings; the last two blocks, ln_f and a
  // parameter-only copy of the tied table.
  EXPECT_EQ(rank_parameters(m, 1, 2, true, false, true).trained, 2 * 49984 + 16384 + 2048);
  const RankParameters last = rank_parameters(m, 1, 2, false, true, true);
  EXPECT_EQ(last.trained, 2 * 49984 + 128);
  EXPECT_EQ(last.head_copy, 16384);
}

TEST(PlanFormulas, ModelStatesFollowTheZeroTable) {
  chorus::plan::Setup s;
  s.model = tiny();
  s.batch = 8;
  const double P = double(parameter_count(s.model));
  MeshChoice m{.dp = 4, .tp = 1, .pp = 1, .micro_batches = 1, .micro_batch_size = 2, .chunks = 1};
  const MemoryEstimate ddp = estimate_memory(s, m);
  EXPECT_EQ(ddp.parameters + ddp.gradients + ddp.optimizer + ddp.master, 16 * P);
  s.zero = 1;
  const MemoryEstimate z1 = estimate_memory(s, m);
  EXPECT_EQ(z1.parameters + z1.gradients + z1.optimizer, 8 * P + 8 * P / 4);
  // Rajbhandari et al. 2020: 2 + 2 + 12/N bytes per parameter with 16-bit parameters.
  s.param_dtype = "bf16";
  const MemoryEstimate z1h = estimate_memory(s, m);
  EXPECT_EQ(z1h.parameters + z1h.gradients + z1h.optimizer + z1h.master, 4 * P + 12 * P / 4);
  s.zero = 3;
  const MemoryEstimate z3h = estimate_memory(s, m);
  EXPECT_EQ(z3h.parameters + z3h.gradients + z3h.optimizer + z3h.master, 16 * P / 4);
}

TEST(PlanFormulas, SixteenBitActivationsAreKorthikanti) {
  chorus::plan::Setup s;
  s.model = model_preset("gpt2-760m");
  s.dtype = "bf16";
  const MeshChoice m{.dp = 1, .tp = 1, .pp = 1, .micro_batches = 1, .micro_batch_size = 4};
  const double sbh = 1024.0 * 4 * 1280, as2b = 20.0 * 1024 * 1024 * 4;
  // One block, no head: s b h (34 + 5 a s / h) bytes.
  EXPECT_DOUBLE_EQ(micro_batch_activations(s, m, 1, false, false), 34 * sbh + 5 * as2b);
  // Checkpointed: every block's input (2 s b h) plus one block recomputed.
  EXPECT_DOUBLE_EQ(micro_batch_activations(s, m, 3, false, true),
                   3 * 2 * sbh + 34 * sbh + 5 * as2b);
}

TEST(PlanFormulas, CollectivesFollowTheirStepCounts) {
  const LinkModel l{1e-6, 1e9};
  EXPECT_DOUBLE_EQ(ring_all_reduce_s(l, 4, 1e6), 6e-6 + 2 * 0.75 * 1e-3);
  EXPECT_DOUBLE_EQ(tree_all_reduce_s(l, 4, 1e6), 4e-6 + 2e-3);
  EXPECT_DOUBLE_EQ(all_reduce_s(l, 4, 1e6), ring_all_reduce_s(l, 4, 1e6));
  EXPECT_DOUBLE_EQ(all_reduce_s(l, 64, 8), tree_all_reduce_s(l, 64, 8));  // latency-bound
  EXPECT_DOUBLE_EQ(reduce_scatter_s(l, 8, 8e6), 7e-6 + 7e-3);
  EXPECT_DOUBLE_EQ(p2p_s(l, 1e6), 1e-6 + 1e-3);
}

// `local` prices a group inside the host by the selector's cost model: the fitted constants of
// the algorithm it would pick (here a 64-core host's, the comm tests' fixture): direct for a small
// all-reduce, the ring for a large one; a group across nodes by the link.
TEST(PlanFormulas, LocalCollectivesFollowTheFittedConstantsPerAlgorithm) {
  Cluster c = cluster_preset("8xh100", 2);
  c.per_node = 64;
  c.costs = std::make_shared<const CostModel>(CHORUS_COMM_FIXTURES "/cost-64-core-host.txt");
  const double mib = 1 << 20;
  const GroupCollectives inside(c, 64, 1);
  EXPECT_NEAR(inside.all_reduce_s(8), (6 * 1 + 80 * 2 * 63 * 8 / mib) * 1e-6, 1e-12);  // direct
  EXPECT_NEAR(inside.all_reduce_s(64 * mib), (1.2 * 126 + 100 * 3 * 63.0 / 64 * 64) * 1e-6,
              1e-9);  // ring
  const GroupCollectives across(c, 64, 2);
  EXPECT_DOUBLE_EQ(across.all_reduce_s(64 * mib), all_reduce_s(group_link(c, 64, 2), 64, 64 * mib));
}

TEST(PlanFormulas, TheBubbleIsTheTextbookFraction) {
  chorus::plan::Setup s;
  s.model = model_preset("gpt2-350m");
  s.batch = 32;
  const Cluster c = cluster_preset("8xh100", 1);
  const MeshChoice m{.dp = 1, .tp = 1, .pp = 4, .micro_batches = 8, .micro_batch_size = 4};
  const StepTime t = estimate_step(s, m, c);
  // (p-1)/(M+p-1) of compute and bubble together.
  EXPECT_NEAR(t.bubble / (t.compute + t.bubble), 3.0 / 11, 1e-12);
  // Point-to-point: per micro-batch an activation forward and its gradient backward (b s h, f32),
  // and the tied table's gradient (V x h, f32) from the last stage to the first.
  const GroupCollectives g(c, 2, 1);
  EXPECT_NEAR(t.p2p, 8 * (2 * g.p2p_s(4.0 * 1024 * 1024 * 4) + g.p2p_s(50257.0 * 1024 * 4)), 1e-12);
}

// Tensor parallelism per micro-batch: 4 all-reduces of b s h per block, the embedding's and the
// head's input's, and the vocabulary-parallel cross-entropy's two (b s maxima, 2 b s sums).
TEST(PlanFormulas, TensorParallelCountsEveryAllReduce) {
  chorus::plan::Setup s;
  s.model = model_preset("gpt2-350m");
  s.batch = 32;
  const Cluster c = cluster_preset("8xh100", 1);
  const MeshChoice m{.dp = 1, .tp = 2, .pp = 1, .micro_batches = 8, .micro_batch_size = 4};
  const GroupCollectives g(c, 2, 1);
  const double bs = 4.0 * 1024;
  EXPECT_NEAR(estimate_step(s, m, c).tp,
              8 * ((4 * 24 + 2) * g.all_reduce_s(bs * 1024 * 4) + g.all_reduce_s(4 * bs) +
                   g.all_reduce_s(8 * bs)),
              1e-12);
}

TEST(PlanErrors, BadInputIsNamed) {
  auto error_of = [](const std::string& flags) {
    const auto r = chorus::testing::run_command(std::string(CHORUS_PLAN_BIN) + " " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.out;
    return r.out;
  };
  {
    const std::string out = error_of("--model gpt2-76m");
    EXPECT_NE(out.find("unknown model preset 'gpt2-76m' (did you mean gpt2-760m?"),
              std::string::npos)
        << out;
  }
  EXPECT_NE(error_of("--cluster 8xh10").find("did you mean 8xh100?"), std::string::npos);
  EXPECT_NE(error_of("--model gpt2-760m --tp 3").find("do not divide the world of 8"),
            std::string::npos);
  EXPECT_NE(error_of("--model gpt2-760m --tp 8").find("20 heads do not divide over tp=8"),
            std::string::npos);
  EXPECT_NE(error_of("--layers 3 --pp 4 --tp 2 --dp 1").find("3 layers are fewer than the 4"),
            std::string::npos);
  EXPECT_NE(error_of("--layrs 3").find("did you mean --layers?"), std::string::npos);
}

TEST(PlanReport, RecommendsDataParallelismForGpt2LargeOnEightH100) {
  Options o = parse_options({"--model", "gpt2-760m", "--dtype", "bf16"});
  const Plan p = make_plan(o.setup, cluster_preset("8xh100", 1), o.mesh);
  ASSERT_EQ(p.recommended, 0);
  EXPECT_EQ(mesh_name(p.meshes[0].mesh), "dp=8 tp=1 pp=1");
  EXPECT_NE(p.reason.find("recommended: dp=8 tp=1 pp=1"), std::string::npos) << p.reason;
  // Sorted: every runnable mesh that fits, fastest first.
  for (size_t i = 1; i < p.meshes.size(); ++i) {
    if (p.meshes[i].invalid.empty() && p.meshes[i].fits) {
      EXPECT_LE(p.meshes[i].time.tokens_per_s, p.meshes[i - 1].time.tokens_per_s);
    }
  }
}

// A mixture of experts: every expert counted in the parameters, the top-k in the FLOPs, E/ep
// experts' states on a rank (sharded over the dp/ep ranks holding them), and the exchange's four
// all-to-alls per MoE block and micro-batch in the step.
TEST(PlanExperts, ParametersFlopsMemoryAndTheExchange) {
  // DeepSpeed-MoE's 1.3B+MoE-128 is "52B" (Rajbhandari et al. 2022, table 1).
  const ModelShape big = model_preset("gpt-1.3b-moe128");
  EXPECT_NEAR(double(parameter_count(big)), 52e9, 0.01 * 52e9);
  ModelShape dense = big;
  dense.experts = 0;
  // Top-1: the active parameters are the dense model's and the routers' (12 blocks of C x E).
  EXPECT_EQ(active_parameter_count(big), parameter_count(dense) + 12 * 2048 * 128);
  // The FLOPs: the routers' 6 h E per token and MoE block more than the dense model's.
  const double tokens = 1000;
  EXPECT_NEAR(model_flops(big, tokens) - model_flops(dense, tokens), tokens * 12 * 6 * 2048 * 128,
              1e-9 * model_flops(big, tokens));
  ModelShape two = big;
  two.top_k = 2;  // a second expert per token: 48 h^2 per token and MoE block more
  EXPECT_NEAR(model_flops(two, tokens) - model_flops(big, tokens), tokens * 12 * 48 * 2048.0 * 2048,
              1e-9 * model_flops(two, tokens));
  two.capacity_factor = 0.5;  // at most half the assignments kept: one expert per token again
  EXPECT_DOUBLE_EQ(two.active_experts(), 1);

  // The tiny model with 4 experts in blocks 1 and 3: a rank at ep 2 holds 2 of each.
  chorus::plan::Setup s;
  s.model = tiny();
  s.model.experts = 4;
  s.model.top_k = 2;
  s.model.moe_every = 2;
  s.batch = 8;
  const int64_t expert = 8 * 64 * 64 + 5 * 64;
  EXPECT_EQ(expert_parameters(s.model), expert);
  const RankParameters r = rank_parameters(s.model, 1, 4, true, true, false, 2);
  EXPECT_EQ(r.experts, 2 * 2 * expert);
  EXPECT_EQ(r.trained + 2 * 4 * expert, parameter_count(s.model));  // the other rank's 2 of each
  MeshChoice m{.dp = 4, .tp = 1, .pp = 1, .micro_batches = 1, .micro_batch_size = 2, .chunks = 1};
  m.ep = 2;
  const double P = double(r.trained), X = double(r.experts);
  const MemoryEstimate ddp = estimate_memory(s, m);
  // DDP over dp: the experts' gradients live from backward to the step only (not held).
  EXPECT_DOUBLE_EQ(ddp.parameters + ddp.gradients + ddp.optimizer, 16 * P + 12 * X);
  s.zero = 1;  // the rest over dp = 4, the experts over the 2 ranks holding the same ones
  const MemoryEstimate z1 = estimate_memory(s, m);
  EXPECT_DOUBLE_EQ(z1.optimizer, 8 * P / 4 + 8 * X / 2);
  s.zero = 0;

  const Cluster c = cluster_preset("8xh100", 1);
  const StepTime t = estimate_step(s, m, c);
  const LinkModel link = group_link(c, 2, 1);
  const double rows = 2.0 * 32 * 64 * 2 * 4;  // b s h x top-2 x f32
  // And the wait for the rank whose experts got most: the imbalance of the ep group's 2 x 64
  // tokens x top-2 over 2 ranks, times this rank's expert compute (a quarter of the experts').
  const double experts_s =
      block_flops(s.model, 8.0 * 32, 0, 4).experts / 4 / c.compute_flops("f32");
  EXPECT_DOUBLE_EQ(t.ep, 2 * (4 * all_to_all_s(link, 2, rows) + all_to_all_s(link, 2, 8.0 * 4)) +
                             expert_imbalance(2.0 * 64 * 2, 2, 4) * experts_s);
  const double exchanges = t.ep - expert_imbalance(2.0 * 64 * 2, 2, 4) * experts_s;
  // A stated imbalance (--routing-imbalance) replaces the estimate; a capacity factor F caps it
  // at F - 1 (every expert takes at most F times its mean).
  s.routing_imbalance = 0.1;
  EXPECT_DOUBLE_EQ(estimate_step(s, m, c).ep, exchanges + 0.1 * experts_s);
  s.routing_imbalance = -1;
  s.model.capacity_factor = 1.25;
  EXPECT_DOUBLE_EQ(estimate_step(s, m, c).ep, exchanges + 0.25 * experts_s);
  s.model.capacity_factor = 1;  // no expert above its mean: no wait
  EXPECT_DOUBLE_EQ(estimate_step(s, m, c).ep, exchanges);
  s.model.capacity_factor = 0;
  m.ep = 1;
  EXPECT_EQ(estimate_step(s, m, c).ep, 0);
}

// Routing imbalance: a rank's count is Dirichlet-multinomial (any split of the experts' shares
// equally likely, the assignments drawn from it); the most loaded of 2 ranks exceeds the average
// by sigma sqrt(2/pi), of more by sigma sqrt(2 ln ep).
TEST(PlanExperts, RoutingImbalanceIsTheDirichletMultinomialMaximum) {
  // 1024 assignments, 4 experts on 2 ranks: the share's variance 1/4 x 1028 / (1024 x 5).
  const double two = 2 * std::sqrt(0.25 * 1028 / (1024 * 5.0)) * std::sqrt(2 / M_PI);
  EXPECT_DOUBLE_EQ(expert_imbalance(1024, 2, 4), two);
  EXPECT_NEAR(two, 0.36, 0.005);  // the router's counts measured 0.37 (docs/PLANNING.md)
  // On 4 ranks (one expert each): 4 sigma sqrt(2 ln 4), variance 3/16 x 1028 / (1024 x 5).
  EXPECT_DOUBLE_EQ(expert_imbalance(1024, 4, 4),
                   4 * std::sqrt(3.0 / 16 * 1028 / (1024 * 5.0)) * std::sqrt(2 * std::log(4.0)));
  // More experts per rank average their shares out: 64 experts on 2 ranks skew less.
  EXPECT_LT(expert_imbalance(1024, 2, 64), expert_imbalance(1024, 2, 4) / 3);
  // Many experts: the binomial sampling alone, 2 sqrt(1/(4a)) sqrt(2/pi).
  EXPECT_NEAR(expert_imbalance(1024, 2, int64_t(1) << 40),
              2 * std::sqrt(0.25 / 1024) * std::sqrt(2 / M_PI), 1e-9);
  // One rank: no one to wait for.
  EXPECT_EQ(expert_imbalance(1024, 1, 4), 0);
}

// The experts' gradients under DDP at ep < dp: reduced after backward, one all-reduce per
// tensor (4 per expert), all exposed; the rest's reduction overlapped with backward as before.
TEST(PlanExperts, ExpertReductionIsOneExposedCallPerTensor) {
  chorus::plan::Setup s;
  s.model = tiny();
  s.model.experts = 4;
  s.batch = 8;
  MeshChoice m{.dp = 2, .tp = 1, .pp = 1, .micro_batches = 1, .micro_batch_size = 4, .chunks = 1};
  m.ep = 1;
  const Cluster c = cluster_preset("8xh100", 1);
  const GroupCollectives g(c, 2, 1);
  const RankParameters r = rank_parameters(s.model, 1, 4, true, true, false, 1);
  ASSERT_EQ(r.experts, 4 * 4 * expert_parameters(s.model));  // 4 blocks x 4 experts
  // 16 experts x (two 4C x C weights, a 4C bias, a C bias), f32.
  const double calls = 16 * (2 * g.all_reduce_s(4 * 64 * 64 * 4.0) + g.all_reduce_s(4 * 64 * 4.0) +
                             g.all_reduce_s(64 * 4.0));
  EXPECT_DOUBLE_EQ(expert_reduction_s(g, s.model, double(r.experts), 4), calls);
  // More than one call's fixed cost: dearer than one all-reduce of all the experts' bytes.
  EXPECT_GT(calls, g.all_reduce_s(double(r.experts) * 4));
  const StepTime t = estimate_step(s, m, c);
  const double rest = g.all_reduce_s(double(r.trained) * 4);
  EXPECT_DOUBLE_EQ(t.dp_total, rest + calls);
  // The rest is one bucket, whose all-reduce follows the last backward whole.
  EXPECT_DOUBLE_EQ(t.dp, rest + calls);
  // At ep = dp every expert is on one rank: nothing to reduce.
  m.ep = 2;
  const StepTime apart = estimate_step(s, m, c);
  EXPECT_DOUBLE_EQ(
      apart.dp_total,
      g.all_reduce_s(double(rank_parameters(s.model, 1, 4, true, true, false, 2).trained) * 4));
}

TEST(PlanExperts, EveryExpertSplitIsAMeshAndChorusTrainsRulesHold) {
  Options o = parse_options({"--layers", "4", "--width", "64", "--heads", "4", "--context", "32",
                             "--experts", "4", "--top-k", "2", "--batch", "8"});
  const Plan p = make_plan(o.setup, cluster_preset("8xh100", 1), o.mesh);
  std::vector<int> eps_at_dp8, eps_at_dp2_tp2_pp2;
  for (const MeshPlan& m : p.meshes) {
    if (m.mesh.dp == 8 && m.invalid.empty()) eps_at_dp8.push_back(m.mesh.ep);
    if (m.mesh.dp == 2 && m.mesh.tp == 2 && m.invalid.empty())
      eps_at_dp2_tp2_pp2.push_back(m.mesh.ep);
  }
  std::sort(eps_at_dp8.begin(), eps_at_dp8.end());
  EXPECT_EQ(eps_at_dp8, (std::vector<int>{1, 2, 4}));  // 8 does not divide 4 experts
  std::sort(eps_at_dp2_tp2_pp2.begin(), eps_at_dp2_tp2_pp2.end());
  EXPECT_EQ(eps_at_dp2_tp2_pp2, (std::vector<int>{1, 2}));  // ep within dp, beside tp and pp
  // chorus-train refuses ZeRO-3 with experts on more than one rank: so does the plan (and ZeRO-3
  // takes dp alone, so no mesh of 8 is left).
  o.setup.zero = 3;
  try {
    make_plan(o.setup, cluster_preset("8xh100", 1), o.mesh);
    ADD_FAILURE() << "ZeRO-3 with experts planned";
  } catch (const PlanError& e) {
    EXPECT_NE(e.message.find("dp=8 tp=1 pp=1: ZeRO-3 does not take experts"), std::string::npos)
        << e.message;
  }
  o.setup.zero = 0;
  EXPECT_NE(json_report(p).find("\"experts\": 4, \"top_k\": 2"), std::string::npos);
  EXPECT_NE(
      text_report(p).find("mixture of experts: 4 experts in each of 4 of the 4 blocks, top-2"),
      std::string::npos)
      << text_report(p);
}

TEST(PlanExperts, BadInputIsNamed) {
  auto error_of = [](const std::string& flags) {
    const auto r = chorus::testing::run_command(std::string(CHORUS_PLAN_BIN) + " " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.out;
    return r.out;
  };
  EXPECT_NE(error_of("--ep 2").find("--ep needs --experts E"), std::string::npos);
  EXPECT_NE(error_of("--experts 4 --top-k 3").find("--top-k 3 is outside [1, 2]"),
            std::string::npos);
  EXPECT_NE(error_of("--experts 1 --top-k 2").find("--top-k 2 exceeds --experts 1"),
            std::string::npos);
  EXPECT_NE(error_of("--experts 4 --capacity-factor x").find("expects a number"),
            std::string::npos);
  EXPECT_NE(error_of("--routing-imbalance 0.1").find("--routing-imbalance needs --experts E"),
            std::string::npos);
  EXPECT_NE(error_of("--experts 4 --routing-imbalance -1").find("expects a number >= 0"),
            std::string::npos);
  EXPECT_NE(error_of("--experts 3 --dp 8 --tp 1 --pp 1 --ep 2")
                .find("cannot run dp=8 tp=1 pp=1 ep=2: 3 experts do not divide over ep=2"),
            std::string::npos);
}

// The outside check (docs/PLANNING.md): Narayanan et al. 2021, table 1, GPT models on DGX A100
// nodes (vocabulary 51200, context 2048, recomputation, interleaved schedule), achieved
// teraFLOP/s per GPU with recomputation counted; the data-parallel reduction after backward, as
// Megatron-LM's local DDP of the time ran it (--no-dp-overlap), and attention's scores through
// memory, as its separate softmax and dropout kernels ran it (--unfused-attention). Every row.
TEST(PlanOutsideCheck, MegatronTableOneWithinTwentyPercent) {
  struct Row {
    int heads, width, layers, tp, pp, gpus, batch;
    double tflops;
  };
  const Row rows[] = {{24, 2304, 24, 1, 1, 32, 512, 137},    {32, 3072, 30, 2, 1, 64, 512, 138},
                      {32, 4096, 36, 4, 1, 128, 512, 142},   {48, 6144, 40, 8, 1, 256, 1024, 135},
                      {64, 8192, 48, 8, 2, 512, 1536, 138},  {80, 10240, 60, 8, 4, 1024, 1792, 140},
                      {96, 12288, 80, 8, 8, 1536, 2304, 148}};
  for (const Row& r : rows) {
    const std::vector<std::string> args = {"--heads",
                                           std::to_string(r.heads),
                                           "--width",
                                           std::to_string(r.width),
                                           "--layers",
                                           std::to_string(r.layers),
                                           "--context",
                                           "2048",
                                           "--vocab",
                                           "51200",
                                           "--tp",
                                           std::to_string(r.tp),
                                           "--pp",
                                           std::to_string(r.pp),
                                           "--batch",
                                           std::to_string(r.batch),
                                           "--dtype",
                                           "f16",
                                           "--param-dtype",
                                           "bf16",
                                           "--checkpoint-activations",
                                           "--micro-batch-size",
                                           "1",
                                           "--schedule",
                                           "interleaved",
                                           "--no-dp-overlap",
                                           "--unfused-attention"};
    const Options o = parse_options(args);
    const Plan p = make_plan(o.setup, cluster_preset("8xa100", r.gpus / 8), o.mesh);
    ASSERT_EQ(p.meshes.size(), 1u);
    ASSERT_TRUE(p.meshes[0].invalid.empty()) << p.meshes[0].invalid;
    const double predicted = p.meshes[0].time.mfu * 312 * 4 / 3;
    EXPECT_NEAR(predicted, r.tflops, 0.2 * r.tflops) << r.width << " x " << r.layers;
    if (r.width != 2304) continue;
    // The 1.7B row by hand: 16 micro-batches of 1 over 24 blocks, the scores (24 heads x 2048^2,
    // 2 bytes) 21 times through memory (6 forward, 9 backward, 6 recomputed) at 2.039 TB/s.
    Options fused = o;
    fused.setup.unfused_attention = false;
    const Plan f = make_plan(fused.setup, cluster_preset("8xa100", r.gpus / 8), fused.mesh);
    EXPECT_NEAR(p.meshes[0].time.compute - f.meshes[0].time.compute,
                16.0 * 24 * 21 * 24 * 2048.0 * 2048 * 2 / 2.039e12, 1e-9);
  }
}

TEST(PlanReport, JsonAndPictureCarryEveryMesh) {
  Options o = parse_options({"--model", "gpt2-760m", "--dtype", "bf16"});
  const Plan p = make_plan(o.setup, cluster_preset("8xh100", 1), o.mesh);
  const std::string json = json_report(p);
  EXPECT_NE(json.find("\"recommended\": {\"dp\": 8, \"tp\": 1, \"pp\": 1, \"ep\": 1}"),
            std::string::npos);
  EXPECT_NE(json.find("\"invalid\": \"20 heads do not divide over tp=8\""), std::string::npos);
  size_t meshes = 0, runnable = 0;
  for (size_t at = json.find("{\"dp\": "); at != std::string::npos;
       at = json.find("{\"dp\": ", at + 1))
    ++meshes;
  for (const MeshPlan& m : p.meshes) runnable += m.invalid.empty() ? 1 : 0;
  EXPECT_EQ(meshes, p.meshes.size() + 1);  // and the recommendation
  // One label per runnable mesh in the picture.
  const std::string svg = svg_chart(p);
  size_t labels = 0;
  for (size_t at = svg.find(">dp="); at != std::string::npos; at = svg.find(">dp=", at + 1))
    ++labels;
  EXPECT_EQ(labels, runnable);
}

// `local`'s measured update: its seconds per step, plus the rank's trained parameters (its shard
// under ZeRO) at the measured seconds per parameter, scaled for 16-bit parameters by the bytes
// their update moves (2 + 2 + 2 + 16 + an 8-byte master copy) against f32's 28; without a
// measurement, the bytes at the memory's bandwidth.
TEST(PlanFormulas, LocalOptimizerIsTheMeasuredUpdatePerParameter) {
  plan::Setup s;
  s.model = tiny();
  s.batch = 8;
  Cluster c = cluster_preset("8xh100", 1);
  const MeshChoice m{.dp = 2, .tp = 1, .pp = 1, .micro_batches = 1, .micro_batch_size = 4};
  const double P = double(rank_parameters(s.model, 1, s.model.layers, true, true, false).trained);
  EXPECT_NEAR(estimate_step(s, m, c).optimizer, P * 28 / c.hbm_bytes_per_s, 1e-15);
  c.optimizer_s_per_element = 2e-9;
  EXPECT_NEAR(estimate_step(s, m, c).optimizer, P * 2e-9, 1e-15);
  s.param_dtype = "bf16";
  EXPECT_NEAR(estimate_step(s, m, c).optimizer, P * 2e-9 * 30 / 28, 1e-15);
  s.param_dtype = "f32";
  s.zero = 1;  // this rank's half
  EXPECT_NEAR(estimate_step(s, m, c).optimizer, P / 2 * 2e-9, 1e-15);
  c.optimizer_fixed_s = 1e-3;  // and a step's cost whatever its parameters
  EXPECT_NEAR(estimate_step(s, m, c).optimizer, 1e-3 + P / 2 * 2e-9, 1e-15);
}

// `local` prices compute at the rate the engine measures on the model's blocks at each mesh's
// micro-batch size, not at the GEMM peak (which still divides MFU).
TEST(PlanLocal, ComputeIsPricedAtTheModelsMeasuredRatePerMicroBatchSize) {
  plan::Setup s;
  s.model.layers = 2;
  s.model.width = 32;
  s.model.heads = 2;
  s.model.context = 16;
  s.batch = 8;
  // Every micro-batch size a mesh of 2 ranks could take: dp 1 or 2, any count dividing the batch.
  EXPECT_EQ(local_micro_batch_sizes(s, 2), (std::set<int64_t>{1, 2, 4, 8}));
  s.micro_batches = 2;
  EXPECT_EQ(local_micro_batch_sizes(s, 2), (std::set<int64_t>{2, 4}));
  s.micro_batches = 0;
  Cluster c = cluster_preset("local", 1);
  c.per_node = 2;  // the sizes above, and a tp 2 slice, whatever this host's core count
  EXPECT_TRUE(c.model_flops_per_s.empty());
  calibrate_local(c, s);
  EXPECT_EQ(c.model_flops_per_s.size(), local_micro_batch_sizes(s, c.world()).size());
  EXPECT_NE(c.source.find("forward and backward, whole and as a tp rank's slice, measured by "
                          "micro-batch size"),
            std::string::npos)
      << c.source;
  // Timed with the other core running the same passes (a mesh's ranks compute at once), whose
  // copies are gone afterwards; and the update measured per parameter.
  EXPECT_NE(c.source.find("with 1 other core(s) running the same"), std::string::npos) << c.source;
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  EXPECT_GT(c.optimizer_s_per_element, 0);
  EXPECT_GE(c.optimizer_fixed_s, 0);
  EXPECT_NE(c.source.find("by time per step and per parameter"), std::string::npos) << c.source;
  // A tp 2 rank's slice is measured at the sizes of tp 2's meshes (dp 1) and prices a tp mesh's
  // compute: the rank's FLOPs (the blocks' over tp) at that rate, not the whole block's.
  ASSERT_EQ(c.tp_flops_per_s.size(), 1u);
  ASSERT_EQ(c.tp_flops_per_s.count(2), 1u);
  EXPECT_EQ(c.tp_flops_per_s.at(2).size(), local_micro_batch_sizes(s, 1).size());
  {
    const MeshChoice m{.dp = 1, .tp = 2, .pp = 1, .micro_batches = 1, .micro_batch_size = 8};
    const StepTime t = estimate_step(s, m, c);
    const double tokens = double(s.batch) * double(s.model.context);
    const double flops = model_flops(s.model, tokens);
    // The head and embeddings at the measured time of a tp rank's share of the vocabulary.
    ASSERT_EQ(c.tp_ends_seconds.count(2), 1u);
    ASSERT_EQ(c.tp_ends_seconds.at(2).count(8), 1u);
    const double head = tokens * 6 * 32 * double(s.model.vocab);
    EXPECT_NEAR(t.compute,
                (flops - head) / 2 / c.tp_flops_per_s.at(2).at(8) + c.tp_ends_seconds.at(2).at(8),
                1e-9 * t.compute);
    EXPECT_EQ(c.ends_s(8, 2), c.tp_ends_seconds.at(2).at(8));
    EXPECT_EQ(c.ends_s(8, 4), 0);  // not measured: the head's FLOPs price it
    EXPECT_NE(c.compute_flops("f32", 8, 2), c.compute_flops("f32", 8, 1));
  }
  for (const int64_t b : {int64_t(8), int64_t(2)}) {
    ASSERT_GT(c.model_flops_per_s.count(b), 0u) << b;
    const MeshChoice m{
        .dp = 1, .tp = 1, .pp = 1, .micro_batches = int(8 / b), .micro_batch_size = b};
    const StepTime t = estimate_step(s, m, c);
    const double tokens = double(s.batch) * double(s.model.context);
    const double flops = model_flops(s.model, tokens);
    // The blocks at their rate, the ends (embeddings, head, loss) at their measured time.
    ASSERT_GT(c.ends_seconds.count(b), 0u) << b;
    const double head = tokens * 6 * 32 * double(s.model.vocab);
    EXPECT_NEAR(t.compute,
                (flops - head) / c.model_flops_per_s.at(b) + double(8 / b) * c.ends_seconds.at(b),
                1e-9 * t.compute)
        << b;
    EXPECT_NEAR(t.mfu, flops / t.total / (double(c.world()) * c.f32_flops), 1e-12);
  }
  // A size not measured takes the nearest one's rate.
  EXPECT_EQ(c.compute_flops("f32", 3), c.model_flops_per_s.at(2));
  EXPECT_EQ(c.compute_flops("f32", 100), c.model_flops_per_s.rbegin()->second);
  // A mixture's blocks are measured too (a dense and an MoE one).
  s.model.experts = 4;
  s.model.top_k = 2;
  s.model.moe_every = 2;
  calibrate_local(c, s);
  EXPECT_NE(c.source.find("(dense and MoE)"), std::string::npos) << c.source;
}

}  // namespace
}  // namespace chorus::plan
