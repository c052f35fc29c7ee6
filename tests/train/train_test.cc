// chorus-train as a user runs it: flags that cannot work, a 3D run equal to one process, the
// deterministic mode's promises (reruns save the same bits; every mesh of data and pipeline
// parallelism saves the one-process run's bits), a run that stops, saves and resumes on another
// mesh, and checkpoint conversion.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "run_command.h"
#include "train_output.h"

namespace chorus::testing {
namespace {

namespace fs = std::filesystem;

std::string train(int ranks, const std::string& flags) {
  const std::string bin = CHORUS_TRAIN_BIN;
  return ranks == 1 ? bin + " " + flags
                    : std::string(CHORUS_RUN_BIN) + " -n " + std::to_string(ranks) + " " + bin +
                          " " + flags;
}

std::string temp_dir() {
  std::string t = (fs::temp_directory_path() / "chorus-train-XXXXXX").string();
  return ::mkdtemp(t.data()) != nullptr ? t : std::string();
}

const std::string kModel = "--layers 4 --width 32 --heads 2 --context 16 --batch 8 ";

// What a run saves, exported as one file of named tensors (every parameter and its optimizer
// state, by name: the same file whatever the mesh), and its --log-json; empty on failure.
struct Saved {
  std::string tensors, log;
};
Saved run_and_save(int ranks, const std::string& flags, const std::string& dir) {
  fs::remove_all(dir + "/ckpt");
  const CommandResult r = run_command(
      train(ranks, flags + " --quiet --save " + dir + "/ckpt --log-json " + dir + "/log.json"));
  EXPECT_EQ(r.exit_code, 0) << flags << "\n" << r.out;
  if (r.exit_code != 0) return {};
  // --convert anywhere on the line, the other flags without effect.
  const CommandResult c = run_command(std::string(CHORUS_TRAIN_BIN) + " --quiet --convert " + dir +
                                      "/ckpt " + dir + "/model.tensors --steps 3");
  EXPECT_EQ(c.exit_code, 0) << c.out;
  return {read_file(dir + "/model.tensors"), read_file(dir + "/log.json")};
}

// A --log-json without what depends on the clock.
std::string without_timings(const std::string& log) {
  return std::regex_replace(log, std::regex(R"(, "step_ms": [^}]*)"), "");
}

// The deterministic mode pins every kernel choice before anything computes (a pipeline's layer
// measurement included): five runs of the same command save the same bits, with no backend
// forced. Autocast bf16, whose kernels a clock would choose per shape class, makes a choice by
// timing show.
TEST(ChorusTrain, DeterministicRerunsSaveTheSameBits) {
  ::unsetenv("CHORUS_TENSOR_GEMM");
  ::unsetenv("CHORUS_TENSOR_BF16_GEMM");
  const std::string dir = temp_dir();
  const std::string flags =
      "--deterministic --dtype bf16 --layers 2 --width 32 --heads 2 --context 8 --batch 8 "
      "--steps 1 ";
  struct Mesh {
    int ranks;
    std::string flags;
  };
  // Nothing is timed: no rank measures a kernel (which would log its rate), the pipeline's cut
  // included; every rank uses the pinned ones.
  const CommandResult logged =
      run_command("CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=TUNE,PAR " +
                  train(6, flags + "--dp 3 --pp 2 --micro-batches 2 --batch 12 --quiet"));
  ASSERT_EQ(logged.exit_code, 0) << logged.out;
  EXPECT_EQ(logged.out.find("GFLOP/s"), std::string::npos) << logged.out;
  EXPECT_NE(logged.out.find("kernels agreed with rank 0: gemm builtin"), std::string::npos)
      << logged.out;
  for (const Mesh& m :
       {Mesh{6, "--dp 3 --pp 2 --micro-batches 2 --batch 12"},
        Mesh{8, "--dp 2 --tp 2 --pp 2 --micro-batches 2"}, Mesh{4, "--dp 4 --zero 3"}}) {
    const Saved first = run_and_save(m.ranks, flags + m.flags, dir);
    ASSERT_FALSE(first.tensors.empty()) << m.flags;
    for (int rerun = 1; rerun < 5; ++rerun)
      EXPECT_TRUE(run_and_save(m.ranks, flags + m.flags, dir).tensors == first.tensors)
          << m.flags << ": rerun " << rerun << " saved other bits";
  }
  fs::remove_all(dir);
}

// The one-process run is the reference: with the same global batch cut into the same
// micro-batches, data parallelism (DDP and every ZeRO stage) and pipelines save its bits and
// log its losses and gradient norms bit for bit (clipping on: the norm is exact).
TEST(ChorusTrain, EveryMeshSavesTheOneProcessBits) {
  const std::string dir = temp_dir();
  const std::string flags =
      "--deterministic --layers 3 --width 32 --heads 2 --context 8 --batch 12 --steps 2 ";
  const Saved one = run_and_save(1, flags + "--micro-batches 12", dir);
  ASSERT_FALSE(one.tensors.empty());
  // Losses with the digits that read back to the same double.
  EXPECT_TRUE(std::regex_search(one.log, std::regex(R"("loss": [0-9]\.[0-9]{15,})"))) << one.log;
  struct Mesh {
    int ranks;
    std::string flags;
  };
  for (const Mesh& m :
       {Mesh{2, "--dp 2 --micro-batches 6"}, Mesh{3, "--dp 3 --micro-batches 4 --zero 1"},
        Mesh{4, "--dp 4 --micro-batches 3 --zero 2"}, Mesh{2, "--dp 2 --micro-batches 6 --zero 3"},
        Mesh{2, "--pp 2 --micro-batches 12"}, Mesh{3, "--pp 3 --micro-batches 12 --schedule gpipe"},
        Mesh{4, "--dp 2 --pp 2 --micro-batches 6 --zero 1"},
        Mesh{4, "--dp 4 --micro-batches 3 --zero 3 --zero-group 2"}}) {
    const Saved got = run_and_save(m.ranks, flags + m.flags, dir);
    EXPECT_TRUE(got.tensors == one.tensors) << m.flags << " saved other bits than one process";
    EXPECT_EQ(without_timings(got.log), without_timings(one.log)) << m.flags;
  }
  fs::remove_all(dir);
}

TEST(ChorusTrain, FlagsThatCannotWorkAreRefusedBeforeAnyWork) {
  struct Case {
    int ranks;
    std::string flags, message;
  };
  const std::vector<Case> cases = {
      {1, "--layrs 4", "unknown flag '--layrs' (did you mean --layers?)"},
      {1, "--dtype f8", "--dtype f8: expected f32, bf16 or f16"},
      {1, "--steps -3", "--steps -3 is outside"},
      {2, "--tp 2 --heads 3 --width 12", "3 heads do not divide over tp=2"},
      {4, "--dp 3", "mesh dp=3 x tp=1 x pp=1 = 3 ranks, but the world has 4"},
      {2, "--pp 2 --micro-batches 1", "--micro-batches 1 is below the 2 pipeline stages"},
      {2, "--pp 2 --layers 1", "1 layers for 2 pipeline stages"},
      {2, "--batch 3", "--batch 3 does not split into dp=2 replicas x 1 micro-batches"},
      {2, "--tp 2 --zero 3", "--zero 3 works with data parallelism alone"},
      {2, "--tp 2 --dtype f16", "--dtype f16 (loss scaling) needs --zero 0, tp=1 and pp=1"},
      {1, "--device gpu", "--device gpu: expected cpu, cuda or cuda:N"},
      {1, "--experts 2 --top-k 3", "--top-k 3 is outside [1, 2]"},
      {1, "--experts 1 --top-k 2", "--top-k 2 exceeds --experts 1"},
      {1, "--experts 0", "--experts 0 is outside"},
      {1, "--top-k 2", "--top-k needs --experts E"},
      {2, "--experts 4 --ep 4", "--ep 4 does not divide dp=2"},
      {4, "--experts 3 --ep 2", "3 experts do not divide over --ep 2"},
      {1, "--ep 2", "--ep needs --experts E"},
      {4, "--zero 1 --zero-group 3", "--zero-group 3 does not divide dp=4"},
      {2, "--zero-group 2", "--zero-group needs --zero 1-3"},
      {2, "--zero 2 --zero-group hosts", "--zero-group hosts: expected host or a group size"},
      {2, "--experts 2 --ep 2 --zero 3", "--zero 3 does not take --experts on more than one"},
      {2, "--experts 2 --ep 2 --zero 1 --dtype f16", "--dtype f16 (loss scaling) needs --zero 0"},
      {6, "--experts 2 --ep 2 --zero 1 --zero-group 3 --batch 12",
       "--zero-group 3 does not take --ep 2: the dp ranks holding the same experts (0 2 4) fall "
       "unevenly"},
  };
  for (const Case& c : cases) {
    const CommandResult r = run_command(train(c.ranks, c.flags + " --steps 1"));
    EXPECT_NE(r.exit_code, 0) << c.flags;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.flags << "\n" << r.out;
    EXPECT_EQ(r.out.find("step 0 loss"), std::string::npos) << "trained anyway: " << c.flags;
  }
}

// A GPU this process cannot use is refused on every rank with the reason, before any work (the
// GPU runs themselves: tests/train_gpu).
TEST(ChorusTrain, AMissingGpuIsRefusedOnEveryRank) {
  const CommandResult probe = run_command(train(1, kModel + "--steps 0 --device cuda:0"));
  if (probe.exit_code == 0) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_NE(probe.out.find("--device cuda:0: cuda:0: no device"), std::string::npos) << probe.out;
  const CommandResult r = run_command(train(2, kModel + "--steps 1 --device cuda"));
  EXPECT_NE(r.exit_code, 0) << r.out;
  const std::string reason = "--device cuda: cuda:0: no device";
  const size_t first = r.out.find(reason);
  ASSERT_NE(first, std::string::npos) << r.out;
  EXPECT_NE(r.out.find(reason, first + 1), std::string::npos) << "said by one rank only\n" << r.out;
  EXPECT_EQ(r.out.find("step 0 loss"), std::string::npos) << r.out;
}

TEST(ChorusTrain, A3DRunOnEightRanksPrintsTheOneProcessLosses) {
  const std::string flags = kModel + "--steps 6";
  const CommandResult one = run_command(train(1, flags));
  ASSERT_EQ(one.exit_code, 0) << one.out;
  const auto ref = losses(one.out);
  ASSERT_EQ(ref.size(), 6u) << one.out;
  EXPECT_LT(ref.at(5), ref.at(0)) << "the loss does not fall";
  const CommandResult r = run_command(train(8, flags + " --dp 2 --tp 2 --pp 2 --micro-batches 2"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto got = losses(r.out);
  ASSERT_EQ(got.size(), ref.size()) << r.out;
  for (const auto& [step, l] : ref) EXPECT_NEAR(got.at(step), l, 2e-4) << "step " << step;
}

TEST(ChorusTrain, StopsSavesAndResumesOnAnotherMesh) {
  const std::string dir = temp_dir();
  const std::string flags = kModel + "--deterministic ";
  const CommandResult whole = run_command(train(4, flags + "--steps 6 --dp 2 --pp 2 --zero 1"));
  ASSERT_EQ(whole.exit_code, 0) << whole.out;
  // Stopped at step 3 of a 6-step schedule; the checkpoint remembers the schedule's length.
  const CommandResult first = run_command(
      train(4, flags + "--lr-steps 6 --steps 3 --dp 2 --pp 2 --zero 1 --save " + dir + "/ckpt"));
  ASSERT_EQ(first.exit_code, 0) << first.out;
  EXPECT_NE(first.out.find("saved " + dir + "/ckpt at step 3"), std::string::npos) << first.out;
  const CommandResult second =
      run_command(train(4, flags + "--steps 6 --dp 2 --tp 2 --load " + dir + "/ckpt"));
  ASSERT_EQ(second.exit_code, 0) << second.out;
  EXPECT_NE(second.out.find("resumed from " + dir +
                            "/ckpt at step 3 (saved at dp=2 tp=1 pp=2 "
                            "zero=1, resharded to dp=2 tp=2 pp=1 zero=0); the LR schedule "
                            "spans 6 steps"),
            std::string::npos)
      << second.out;
  const auto ref = losses(whole.out), got = losses(second.out);
  ASSERT_EQ(got.size(), 3u) << second.out;  // steps 3, 4, 5: the numbering continues
  for (const auto& [step, l] : got) EXPECT_NEAR(l, ref.at(step), 2e-4) << "step " << step;
  // A checkpoint of another model is refused, naming what differs.
  const CommandResult other = run_command(train(
      2,
      "--layers 4 --width 64 --heads 2 --context 16 --batch 8 --steps 4 --load " + dir + "/ckpt"));
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.out.find("holds another model: width 32, this one has 64"), std::string::npos)
      << other.out;
  // Exported as one file and imported back, it still resumes.
  const CommandResult exp = run_command(std::string(CHORUS_TRAIN_BIN) + " --convert " + dir +
                                        "/ckpt " + dir + "/model.tensors");
  ASSERT_EQ(exp.exit_code, 0) << exp.out;
  const CommandResult imp = run_command(std::string(CHORUS_TRAIN_BIN) + " --convert " + dir +
                                        "/model.tensors " + dir + "/again");
  ASSERT_EQ(imp.exit_code, 0) << imp.out;
  const CommandResult third = run_command(train(1, flags + "--steps 6 --load " + dir + "/again"));
  ASSERT_EQ(third.exit_code, 0) << third.out;
  const auto again = losses(third.out);
  for (const auto& [step, l] : again) EXPECT_NEAR(l, ref.at(step), 2e-4) << "step " << step;
  fs::remove_all(dir);
}

// A mixture-of-experts GPT on one process: the loss falls, and a run stopped, exported as one
// file, imported and resumed continues on the same curve; a dense model refuses its checkpoint.
TEST(ChorusTrain, ExpertsTrainAndResumeThroughAnExportedCheckpoint) {
  const std::string dir = temp_dir();
  const std::string flags =
      "--layers 2 --width 32 --heads 2 --context 16 --batch 8 --lr 3e-3 "
      "--experts 4 --top-k 2 --moe-every 2 --capacity-factor 1.25 "
      "--deterministic ";
  const CommandResult whole = run_command(train(1, flags + "--steps 12"));
  ASSERT_EQ(whole.exit_code, 0) << whole.out;
  EXPECT_NE(whole.out.find("experts: 4 in each of 1 MoE block(s) of 2, 4 per rank (ep=1), top-2, "
                           "capacity factor 1.25"),
            std::string::npos)
      << whole.out;
  // An expert without tokens in a step is expected (8 experts, top-1, 64 tokens: some idle): no
  // warning about its missing gradient.
  for (const char* zero : {"0", "1"}) {
    const CommandResult idle = run_command(
        train(1, std::string("--layers 2 --width 32 --heads 2 --context 16 --batch 4 --experts 8 "
                             "--steps 2 --zero ") +
                     zero));
    ASSERT_EQ(idle.exit_code, 0) << idle.out;
    EXPECT_EQ(idle.out.find("got no gradient"), std::string::npos) << idle.out;
  }
  const auto ref = losses(whole.out);
  ASSERT_EQ(ref.size(), 12u) << whole.out;
  EXPECT_LT(ref.at(11), ref.at(0) - 0.5) << "the loss does not fall";
  const CommandResult first =
      run_command(train(1, flags + "--lr-steps 12 --steps 6 --save " + dir + "/ckpt"));
  ASSERT_EQ(first.exit_code, 0) << first.out;
  const std::string bin = CHORUS_TRAIN_BIN;
  ASSERT_EQ(run_command(bin + " --convert " + dir + "/ckpt " + dir + "/m.tensors").exit_code, 0);
  ASSERT_EQ(run_command(bin + " --convert " + dir + "/m.tensors " + dir + "/again").exit_code, 0);
  const CommandResult second = run_command(train(1, flags + "--steps 12 --load " + dir + "/again"));
  ASSERT_EQ(second.exit_code, 0) << second.out;
  const auto got = losses(second.out);
  ASSERT_EQ(got.size(), 6u) << second.out;
  for (const auto& [step, l] : got) EXPECT_EQ(l, ref.at(step)) << "step " << step;
  const CommandResult dense = run_command(train(
      1,
      "--layers 2 --width 32 --heads 2 --context 16 --batch 8 --steps 8 --load " + dir + "/ckpt"));
  EXPECT_NE(dense.exit_code, 0);
  EXPECT_NE(dense.out.find("holds another model: experts 4, this one has none"), std::string::npos)
      << dense.out;
  fs::remove_all(dir);
}

// Experts over ep ranks (and replicated over dp/ep groups) against one process taking the same
// micro-batches (the routing, its capacity and the load balance are per micro-batch): the same
// losses, to the rounding of the experts' gradients summed across ranks.
TEST(ChorusTrain, ExpertParallelRunsPrintTheOneProcessLosses) {
  const std::string flags =
      "--layers 2 --width 32 --heads 2 --context 16 --batch 8 --lr 3e-3 "
      "--experts 4 --top-k 2 --moe-every 2 --capacity-factor 1.25 "
      "--steps 6 ";
  for (const auto& [ranks, mesh] :
       {std::pair<int, std::string>{2, "--dp 2 --ep 2"}, {4, "--dp 4 --ep 2"}}) {
    const CommandResult one =
        run_command(train(1, flags + "--micro-batches " + std::to_string(ranks)));
    ASSERT_EQ(one.exit_code, 0) << one.out;
    const auto ref = losses(one.out);
    ASSERT_EQ(ref.size(), 6u) << one.out;
    EXPECT_LT(ref.at(5), ref.at(0) - 0.3) << "the loss does not fall";
    const CommandResult r = run_command(train(ranks, flags + mesh));
    ASSERT_EQ(r.exit_code, 0) << mesh << "\n" << r.out;
    EXPECT_NE(r.out.find("experts: 4 in each of 1 MoE block(s) of 2, 2 per rank (ep=2)"),
              std::string::npos)
        << r.out;
    const auto got = losses(r.out);
    ASSERT_EQ(got.size(), ref.size()) << r.out;
    for (const auto& [step, l] : ref)
      EXPECT_NEAR(got.at(step), l, 2e-4) << mesh << " step " << step;
  }
}

const std::string kExperts =
    "--deterministic --layers 2 --width 32 --heads 2 --context 16 --batch 8 --lr 3e-3 "
    "--experts 4 --top-k 2 --moe-every 2 --capacity-factor 1.25 ";

// A --log-json without the losses (a pipeline sums an MoE block's auxiliary loss into the
// reported loss on another stage: other rounding; the gradient norms stay exact).
std::string without_losses(const std::string& log) {
  return std::regex_replace(without_timings(log), std::regex(R"("loss": [^,]*, )"), "");
}

// Expert parallelism against one process, deterministic, the same micro-batches: every ep (1,
// 2, 4; dp 4, and dp 2 with two micro-batches each), with DDP or ZeRO 1-2 (the experts' shards
// taken from the fold; ZeRO-2 at dp 4 x ep 2 also in shard groups of 2, each expert over 1 of
// its 2 ranks) and through a pipeline (dp 2 x pp 2 x 2 micro-batches at ep 1, and at ep 2
// interleaved over 4 blocks: several forwards of an MoE block before its backwards, each
// backward folded, after a measured cut), saves the one-process bits and logs its losses and
// gradient norms. A token sent to the wrong rank, or the exchange's rows one off, is caught
// through the pipeline and under ZeRO.
TEST(ChorusTrain, ExpertParallelSavesTheOneProcessBits) {
  const std::string dir = temp_dir();
  const std::string flags = kExperts + "--steps 3 ", deep = flags + "--layers 4 ";
  const Saved one = run_and_save(1, flags + "--micro-batches 4", dir);
  ASSERT_FALSE(one.tensors.empty());
  const std::string zero = "--dp 2 --ep 2 --micro-batches 2 --zero 2";
  for (const auto& [ranks, mesh] : {std::pair<int, std::string>{4, "--dp 4 --ep 1"},
                                    {4, "--dp 4 --ep 2"},
                                    {4, "--dp 4 --ep 4"},
                                    {2, "--dp 2 --ep 1 --micro-batches 2"},
                                    {2, "--dp 2 --ep 2 --micro-batches 2"},
                                    {4, "--dp 2 --ep 1 --pp 2 --micro-batches 2"},
                                    {4, "--dp 4 --ep 4 --zero 1"},
                                    {2, zero},
                                    {4, "--dp 4 --ep 2 --zero 2 --zero-group 2"}}) {
    const Saved got = run_and_save(ranks, flags + mesh, dir);
    EXPECT_TRUE(got.tensors == one.tensors) << mesh << " saved other bits than one process";
    EXPECT_EQ(without_timings(got.log), without_timings(one.log)) << mesh;
  }
  const Saved deep_one = run_and_save(1, deep + "--micro-batches 4", dir);
  const std::string pipeline = "--dp 2 --ep 2 --pp 2 --micro-batches 2 --schedule interleaved";
  const Saved piped = run_and_save(4, deep + pipeline, dir);
  ASSERT_FALSE(deep_one.tensors.empty());
  EXPECT_TRUE(piped.tensors == deep_one.tensors) << pipeline << " saved other bits";
  EXPECT_EQ(without_losses(piped.log), without_losses(deep_one.log)) << pipeline;
  for (const char* fault : {"ep_wrong_rank", "ep_count_off_by_one"}) {
    ::setenv("CHORUS_PARALLEL_FAULT", fault, 1);
    const Saved got = run_and_save(4, deep + pipeline, dir);
    const Saved sharded = run_and_save(2, flags + zero, dir);
    ::unsetenv("CHORUS_PARALLEL_FAULT");
    ASSERT_FALSE(got.tensors.empty()) << fault;
    EXPECT_FALSE(got.tensors == deep_one.tensors) << fault << " went unnoticed at " << pipeline;
    EXPECT_NE(without_losses(got.log), without_losses(deep_one.log)) << fault << " " << pipeline;
    ASSERT_FALSE(sharded.tensors.empty()) << fault;
    EXPECT_FALSE(sharded.tensors == one.tensors) << fault << " went unnoticed at " << zero;
    EXPECT_NE(without_timings(sharded.log), without_timings(one.log)) << fault << " at " << zero;
  }
  fs::remove_all(dir);
}

// Experts on several ranks checkpoint like the rest: saved at ep 2 (each rank its experts and
// their AdamW state, under their names in the whole model) and resumed at ep 2, 4, 1, another dp
// and on one process (the same micro-batches), each continues the uninterrupted run bit for bit;
// the checkpoint holds the whole model, so loading and saving it again at ep 4 or on one process
// exports the same bytes.
TEST(ChorusTrain, ExpertParallelCheckpointsResumeAtAnotherEp) {
  const std::string dir = temp_dir(), ckpt = dir + "/ckpt";
  const std::string log = " --log-json " + dir + "/log.json";
  const CommandResult whole = run_command(train(4, kExperts + "--dp 4 --ep 2 --steps 6" + log));
  ASSERT_EQ(whole.exit_code, 0) << whole.out;
  const std::string ref = read_file(dir + "/log.json");
  const auto ref_losses = losses(whole.out);
  ASSERT_EQ(ref_losses.size(), 6u) << whole.out;
  EXPECT_LT(ref_losses.at(5), ref_losses.at(0) - 0.3) << "the loss does not fall";
  const CommandResult first =
      run_command(train(4, kExperts + "--dp 4 --ep 2 --lr-steps 6 --steps 3 --save " + ckpt));
  ASSERT_EQ(first.exit_code, 0) << first.out;
  struct Mesh {
    int ranks;
    std::string flags, here;
  };
  for (const Mesh& m :
       {Mesh{4, "--dp 4 --ep 2", ""},
        Mesh{4, "--dp 4 --ep 4", ", resharded to dp=4 tp=1 pp=1 zero=0 ep=4"},
        Mesh{4, "--dp 4 --ep 1", ", resharded to dp=4 tp=1 pp=1 zero=0"},
        Mesh{2, "--dp 2 --ep 2 --micro-batches 2", ", resharded to dp=2 tp=1 pp=1 zero=0 ep=2"},
        Mesh{1, "--micro-batches 4", ", resharded to dp=1 tp=1 pp=1 zero=0"}}) {
    const CommandResult r =
        run_command(train(m.ranks, kExperts + m.flags + " --steps 6 --load " + ckpt + log));
    ASSERT_EQ(r.exit_code, 0) << m.flags << "\n" << r.out;
    EXPECT_NE(r.out.find("resumed from " + ckpt +
                         " at step 3 (saved at dp=4 tp=1 pp=1 zero=0 ep=2" + m.here + ")"),
              std::string::npos)
        << r.out;
    const std::string got = read_file(dir + "/log.json");
    EXPECT_EQ(without_timings(got), without_timings(ref.substr(ref.find("{\"step\": 3"))))
        << m.flags;
  }
  // The whole model is in the checkpoint: loaded at ep 4 and on one process and saved again
  // without a step, it exports the bytes the ep 2 checkpoint exports.
  const std::string bin = CHORUS_TRAIN_BIN;
  ASSERT_EQ(run_command(bin + " --convert " + ckpt + " " + dir + "/ep2.tensors").exit_code, 0);
  const std::string saved = read_file(dir + "/ep2.tensors");
  ASSERT_FALSE(saved.empty());
  for (const auto& [ranks, mesh] :
       {std::pair<int, std::string>{4, "--dp 4 --ep 4"}, {1, "--micro-batches 4"}}) {
    const CommandResult r = run_command(
        train(ranks, kExperts + mesh + " --steps 3 --load " + ckpt + " --save " + dir + "/again"));
    ASSERT_EQ(r.exit_code, 0) << mesh << "\n" << r.out;
    ASSERT_EQ(run_command(bin + " --convert " + dir + "/again " + dir + "/again.tensors").exit_code,
              0);
    EXPECT_TRUE(read_file(dir + "/again.tensors") == saved) << mesh << " saved other bits";
  }
  fs::remove_all(dir);
}

// The experts' ZeRO shards checkpoint like the rest, deterministic: each resume continues the
// uninterrupted one-process run bit for bit. Saved under ZeRO-2 at ep 1 (the experts still
// sharded apart, over all of dp), it resumes under hybrid ZeRO-1 (each expert over 2 of its 4
// ranks) and at dp 2 ep 2 (DDP); a one-process checkpoint resumes under ZeRO-2; saved under
// ZeRO-1 at ep 2, it resumes at ep 4 (ZeRO-2), dp 2 (ZeRO-2) and on one process. The checkpoint
// holds the whole model (loaded and saved again on one process, it exports the same bytes; a
// one-process checkpoint loaded and saved again under ZeRO-2 at ep 2 too). A shard written or
// read one element off, or left out, fails these.
TEST(ChorusTrain, ExpertParallelZeroCheckpointsResumeAtAnotherMesh) {
  const std::string dir = temp_dir(), ckpt = dir + "/ckpt", one_ckpt = dir + "/one";
  const std::string log = " --log-json " + dir + "/log.json";
  const CommandResult whole = run_command(train(1, kExperts + "--micro-batches 4 --steps 6" + log));
  ASSERT_EQ(whole.exit_code, 0) << whole.out;
  ASSERT_EQ(losses(whole.out).size(), 6u) << whole.out;
  const std::string ref = read_file(dir + "/log.json");
  const std::string ref_tail = without_timings(ref.substr(ref.find("{\"step\": 3")));
  struct Mesh {
    int ranks;
    std::string flags;
  };
  auto resumes = [&](const std::string& from, const Mesh& m) {
    const CommandResult r =
        run_command(train(m.ranks, kExperts + m.flags + " --steps 6 --load " + from + log));
    EXPECT_EQ(r.exit_code, 0) << m.flags << "\n" << r.out;
    EXPECT_NE(r.out.find("resumed from " + from + " at step 3"), std::string::npos) << r.out;
    EXPECT_EQ(without_timings(read_file(dir + "/log.json")), ref_tail) << m.flags;
  };
  const CommandResult first = run_command(
      train(4, kExperts + "--dp 4 --ep 1 --zero 2 --lr-steps 6 --steps 3 --save " + ckpt));
  ASSERT_EQ(first.exit_code, 0) << first.out;
  for (const Mesh& m :
       {Mesh{4, "--dp 4 --zero 1 --zero-group 2"}, Mesh{2, "--dp 2 --ep 2 --micro-batches 2"}})
    resumes(ckpt, m);
  const CommandResult one = run_command(
      train(1, kExperts + "--micro-batches 4 --lr-steps 6 --steps 3 --save " + one_ckpt));
  ASSERT_EQ(one.exit_code, 0) << one.out;
  resumes(one_ckpt, Mesh{2, "--dp 2 --zero 2 --micro-batches 2"});
  // At ep 2.
  const CommandResult saved = run_command(
      train(4, kExperts + "--dp 4 --ep 2 --zero 1 --lr-steps 6 --steps 3 --save " + ckpt));
  ASSERT_EQ(saved.exit_code, 0) << saved.out;
  for (const Mesh& m :
       {Mesh{4, "--dp 4 --ep 4 --zero 2"}, Mesh{2, "--dp 2 --ep 2 --zero 2 --micro-batches 2"},
        Mesh{1, "--micro-batches 4"}})
    resumes(ckpt, m);
  const std::string bin = CHORUS_TRAIN_BIN;
  auto exported = [&](const std::string& from) {
    EXPECT_EQ(run_command(bin + " --convert " + from + " " + dir + "/x.tensors").exit_code, 0);
    return read_file(dir + "/x.tensors");
  };
  for (const auto& [from, ranks, mesh] :
       {std::tuple<std::string, int, std::string>{ckpt, 1, "--micro-batches 4"},
        {one_ckpt, 4, "--dp 4 --ep 2 --zero 2"}}) {
    const std::string before = exported(from);
    ASSERT_FALSE(before.empty());
    const CommandResult r = run_command(
        train(ranks, kExperts + mesh + " --steps 3 --load " + from + " --save " + dir + "/again"));
    ASSERT_EQ(r.exit_code, 0) << mesh << "\n" << r.out;
    EXPECT_TRUE(exported(dir + "/again") == before) << mesh << " saved other bits";
  }
  fs::remove_all(dir);
}

// Expert parallelism with ZeRO (the rest sharded over dp, the experts over the ranks holding
// them), activation checkpointing (the MoE blocks recomputed, routing and exchanges included),
// mixed precision (f16's skipped steps skipped on every rank and by both optimizers), tensor
// parallelism (the MoE layers replicated over tp) and pipelines (the auxiliary losses on their
// stage) against one process taking the same micro-batches in the same precision.
TEST(ChorusTrain, ExpertParallelRunsWithEveryStrategy) {
  const std::string flags =
      "--layers 2 --width 32 --heads 2 --context 16 --batch 8 --lr 3e-3 "
      "--experts 4 --top-k 2 --moe-every 2 --capacity-factor 1.25 "
      "--steps 4 ";
  struct Case {
    int ranks, micro;  // micro: the global micro-batches (dp x --micro-batches)
    std::string mesh, dtype, model = "";
  };
  // The one-process losses and gradient norms, by command. The norms see a gradient reduced at
  // the wrong scale (AdamW's updates hardly do).
  std::map<std::string, std::pair<std::map<int, double>, std::map<int, double>>> refs;
  for (const Case& c :
       {Case{2, 2, "--dp 2 --ep 2 --zero 2 --checkpoint-activations", "f32"},
        Case{2, 2, "--dp 2 --zero 2", "f32"}, Case{4, 4, "--dp 4 --ep 2 --zero 2", "f32"},
        // Hybrid: the rest over pairs of ranks, each expert on one rank of each pair.
        Case{4, 4, "--dp 4 --ep 2 --zero 2 --zero-group 2", "f32"},
        Case{2, 2, "--dp 2 --ep 2 --checkpoint-activations", "bf16"},
        Case{2, 2, "--dp 2 --ep 2", "f16"}, Case{4, 2, "--dp 2 --ep 2 --tp 2", "f32"},
        // Both blocks MoE: stage 0's auxiliary losses flow in its own backward.
        Case{4, 4, "--dp 2 --ep 2 --pp 2 --zero 1", "f32", "--moe-every 1 "},
        Case{8, 4, "--dp 2 --ep 2 --tp 2 --pp 2 --zero 2", "f32", "--moe-every 1 "}}) {
    const std::string common = flags + c.model + "--dtype " + c.dtype + " ";
    const std::string reference = common + "--micro-batches " + std::to_string(c.micro);
    if (!refs.count(reference)) {
      const CommandResult one = run_command(train(1, reference));
      ASSERT_EQ(one.exit_code, 0) << one.out;
      refs[reference] = {losses(one.out), grad_norms(one.out)};
    }
    const auto& [ref, ref_norms] = refs[reference];
    ASSERT_EQ(ref.size(), 4u) << reference;
    const CommandResult r = run_command(train(c.ranks, common + c.mesh));
    ASSERT_EQ(r.exit_code, 0) << c.mesh << "\n" << r.out;
    EXPECT_EQ(r.out.find("got no gradient"), std::string::npos) << r.out;
    const auto got = losses(r.out);
    ASSERT_EQ(got.size(), ref.size()) << r.out;
    const auto norms = grad_norms(r.out);
    const double tolerance = c.dtype == "f32" ? 2e-4 : 2e-3;
    for (const auto& [step, l] : ref) {
      EXPECT_NEAR(got.at(step), l, tolerance) << c.mesh << " " << c.dtype << " step " << step;
      EXPECT_NEAR(norms.at(step), ref_norms.at(step), 10 * tolerance)
          << c.mesh << " " << c.dtype << " step " << step << ": the gradient norm";
    }
  }
}

TEST(ChorusTrain, ShowsAScheduleWithItsBubbleWithoutRanks) {
  const std::string dir = temp_dir();
  const CommandResult r = run_command(train(1,
                                            "--show-schedule --pp 4 --micro-batches 8 "
                                            "--schedule-svg " +
                                                dir + "/1f1b.svg"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // 1F1B: a warm-up of p-1-s forwards, then one forward one backward; (p-1)/(m+p-1) = 3/11.
  EXPECT_NE(r.out.find("stage 3: . . . F0 B0 F1 B1 F2 B2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bubble 27.3% (the formula: 27.3%)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peak live activations per stage: 4 3 2 1"), std::string::npos) << r.out;
  std::ifstream svg(dir + "/1f1b.svg");
  const std::string text((std::istreambuf_iterator<char>(svg)), {});
  EXPECT_EQ(text.rfind("<svg", 0), 0u) << text.substr(0, 80);
  EXPECT_NE(text.find(">B7<"), std::string::npos);
  const CommandResult interleaved = run_command(
      train(1, "--show-schedule --pp 2 --micro-batches 4 --schedule interleaved --chunks 2"));
  EXPECT_NE(interleaved.out.find("bubble 11.1% (the formula: 11.1%)"), std::string::npos)
      << interleaved.out;
  const CommandResult bad = run_command(train(1, "--show-schedule --pp 4 --micro-batches 2"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("--micro-batches 2 is below the 4 pipeline stages"), std::string::npos)
      << bad.out;
  fs::remove_all(dir);
}

// One command lists every knob: chorus-train links every layer whole, so knobs that it never
// reads (a test-only fault, a GPU path) register too, with their value when set.
TEST(ChorusTrain, PrintEnvListsTheKnobsOfEveryLayer) {
  const CommandResult r = run_command("CHORUS_PARALLEL_FAULT=none " + train(1, "--print-env"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* knob :
       {"CHORUS_TIMEOUT ", "CHORUS_KERNELS_ISA ", "CHORUS_SHM_SLOT_BYTES ",
        "CHORUS_GPU_IPC_CHUNK_BYTES ", "CHORUS_TENSOR_GEMM ", "CHORUS_PARALLEL_FAULT "})
    EXPECT_NE(r.out.find(std::string("\n") + knob), std::string::npos) << knob << " in\n" << r.out;
  EXPECT_NE(r.out.find("CHORUS_PARALLEL_FAULT          string  none"), std::string::npos) << r.out;
}

// The expert exchange on the trace's "comm ep" track (docs/PARALLELISM.md, "What the trace
// measures"): per rank, step and MoE layer one all_to_all of E/ep int64, then dispatch and
// combine forward, combine and dispatch backward, each a send_recv naming its peer and counting
// whole rows it sends. The rows a rank dispatches come back from its peer's combine, and each
// backward sends as many as the forward exchange it reverses received.
TEST(ChorusTrain, TheTraceShowsTheExpertExchangeAndItsSizes) {
  const std::string dir = temp_dir();
  const std::string trace = dir + "/trace.json";
  const CommandResult r = run_command(
      train(2,
            "--layers 2 --width 32 --heads 2 --context 16 --batch 8 --experts 4 --top-k 2 "
            "--capacity-factor 1.25 --dp 2 --ep 2 --steps 2 --trace " +
                trace));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream in(trace);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  struct Op {
    double ts;
    bool counts;
    int64_t count;
    std::string args;
  };
  std::vector<std::vector<Op>> ops(2);
  static const std::regex event(
      R"re(\{"ph": "X", "name": "(all_to_all|send_recv) ([0-9]+) ([a-z0-9]+)", "pid": ([0-9]+), )re"
      R"re("tid": [0-9]+, "ts": ([0-9.]+), "dur": [0-9.]+, "args": \{([^}]*)\}\})re");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), event);
       it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    const bool counts = m[1] == "all_to_all";
    EXPECT_EQ(m[3].str(), counts ? "int64" : "float") << m[0];
    const int pid = std::stoi(m[4].str());
    ASSERT_TRUE(pid == 0 || pid == 1) << m[0];
    ops[static_cast<size_t>(pid)].push_back(
        {std::stod(m[5].str()), counts, std::stoll(m[2].str()), m[6].str()});
  }
  // 2 steps x 2 MoE layers x (all_to_all, dispatch, combine, combine back, dispatch back).
  for (int rank = 0; rank < 2; ++rank) {
    auto& mine = ops[static_cast<size_t>(rank)];
    ASSERT_EQ(mine.size(), 20u) << "rank " << rank << "\n" << text.substr(0, 2000);
    std::sort(mine.begin(), mine.end(), [](const Op& a, const Op& b) { return a.ts < b.ts; });
    for (const Op& op : mine) {
      if (op.counts) {
        EXPECT_EQ(op.count, 2) << "E/ep counts per peer";
        continue;
      }
      EXPECT_EQ(op.count % 32, 0) << "whole rows of width 32";
      EXPECT_NE(op.args.find("\"peer\": " + std::to_string(1 - rank)), std::string::npos)
          << op.args;
      EXPECT_EQ(op.args.find("\"seq\""), std::string::npos) << op.args;
    }
  }
  // Per step: A D0 C0 A D1 C1 | C1' D1' C0' D0' (backward in reverse layer order).
  for (int step = 0; step < 2; ++step)
    for (int layer = 0; layer < 2; ++layer)
      for (int rank = 0; rank < 2; ++rank) {
        const auto& me = ops[static_cast<size_t>(rank)];
        const auto& peer = ops[static_cast<size_t>(1 - rank)];
        const size_t at = static_cast<size_t>(step * 10), fwd = at + 3 * layer,
                     bwd = at + 6 + 2 * (1 - layer);
        ASSERT_TRUE(me[fwd].counts && !me[fwd + 1].counts && !me[bwd].counts);
        EXPECT_EQ(me[fwd + 1].count, peer[fwd + 2].count) << "dispatched rows come back";
        EXPECT_EQ(me[bwd].count, me[fwd + 1].count) << "combine's backward: the dispatch's rows";
        EXPECT_EQ(me[bwd + 1].count, me[fwd + 2].count) << "dispatch's backward: the combine's";
      }
  fs::remove_all(dir);
}

TEST(ChorusTrain, TheTraceFollowsTheFormatAndShowsEveryRank) {
  const std::string dir = temp_dir();
  const std::string trace = dir + "/trace.json";
  const CommandResult r = run_command(
      train(8, kModel + "--steps 2 --dp 2 --tp 2 --pp 2 --micro-batches 2 --trace " + trace));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string checker = std::string(CHORUS_SOURCE_DIR) + "/tools/check_trace.py";
  const CommandResult ok = run_command("python3 " + checker + " " + trace + " --ranks 8");
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_NE(ok.out.find("on 8 ranks"), std::string::npos) << ok.out;
  std::ifstream in(trace);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  for (const char* what : {"\"forward h.0\"", "\"backward h.3\"", "\"comm dp\"", "\"comm tp\"",
                           "\"pp act\"", "\"pipeline\"", "\"step 1\""})
    EXPECT_NE(text.find(what), std::string::npos) << "no " << what << " in the trace";
  // The checker has teeth: two events on a track that overlap without nesting fail it.
  std::ofstream(dir + "/bad.json")
      << "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"a\", \"pid\": 0, \"tid\": 0, \"ts\": 0, "
         "\"dur\": 10}, {\"ph\": \"X\", \"name\": \"b\", \"pid\": 0, \"tid\": 0, \"ts\": 5, "
         "\"dur\": 10}]}";
  const CommandResult bad = run_command("python3 " + checker + " " + dir + "/bad.json");
  EXPECT_NE(bad.exit_code, 0) << bad.out;
  EXPECT_NE(bad.out.find("overlaps 'a' without nesting"), std::string::npos) << bad.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace chorus::testing
