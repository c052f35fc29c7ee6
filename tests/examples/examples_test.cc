// examples/ddp_regression and examples/gpt_zero, launched as a user launches them; the losses a
// parallel run prints must match the one-process run's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "run_command.h"

namespace chorus::testing {
namespace {

// The values of `key=` in the output, in order ("epoch=0 loss=1.5" -> loss: 1.5).
std::vector<double> values_of(const std::string& out, const std::string& key) {
  std::vector<double> v;
  const std::regex re(key + "=([-0-9.eE+]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    v.push_back(std::stod((*it)[1].str()));
  return v;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& ref, double rel,
                  const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_NEAR(got[i], ref[i], rel * std::abs(ref[i])) << what << ", value " << i;
}

std::string temp_dir() {
  std::string t = (std::filesystem::temp_directory_path() / "chorus-examples-XXXXXX").string();
  return ::mkdtemp(t.data()) != nullptr ? t : std::string();
}

// The one-process run every launch is compared with.
const std::vector<double>& one_rank_losses() {
  static const std::vector<double> losses = [] {
    const CommandResult r = run_command(std::string(DDP_REGRESSION_BIN) + " --save ''");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return values_of(r.out, "loss");
  }();
  return losses;
}

TEST(DdpRegression, FourRanksUnderChorusRunMatchOneRank) {
  const std::vector<double>& ref = one_rank_losses();
  ASSERT_EQ(ref.size(), 3u);
  EXPECT_LT(ref[2], ref[0] * 0.5) << "the loss does not fall";
  const std::string dir = temp_dir();
  const std::string ckpt = dir + "/model.ckpt";
  const CommandResult r =
      run_command(std::string(CHORUS_RUN_BIN) + " -n 4 " + DDP_REGRESSION_BIN + " --save " + ckpt);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("4 ranks, global batch 128 (32 per rank)"), std::string::npos) << r.out;
  expect_close(values_of(r.out, "loss"), ref, 1e-4, "chorus-run -n 4");
  EXPECT_TRUE(std::filesystem::exists(ckpt)) << r.out;
  EXPECT_EQ(values_of(r.out, "epoch").size(), 3u) << "only rank 0 prints: " << r.out;
  std::filesystem::remove_all(dir);
}

TEST(DdpRegression, TorchrunStyleEnvironmentMatchesOneRank) {
  // What torchrun sets for each worker: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
  // MASTER_ADDR, MASTER_PORT (a free port picked by the shell from the kernel's range).
  const std::string script =
      "port=$((20000 + $$ % 20000)); pids=; for r in 0 1 2 3; do "
      "env -u CHORUS_RANK RANK=$r WORLD_SIZE=4 LOCAL_RANK=$r LOCAL_WORLD_SIZE=4 "
      "MASTER_ADDR=127.0.0.1 MASTER_PORT=$port CHORUS_TIMEOUT=60 " +
      std::string(DDP_REGRESSION_BIN) +
      " --save '' & pids=\"$pids $!\"; done; st=0; "
      "for p in $pids; do wait $p || st=1; done; exit $st";
  const CommandResult r =
      run_command("sh -c '" + std::regex_replace(script, std::regex("'"), "'\\''") + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  expect_close(values_of(r.out, "loss"), one_rank_losses(), 1e-4, "torchrun-style");
}

TEST(DdpRegression, MpirunMatchesOneRank) {
  if (run_command("command -v mpirun").exit_code != 0) GTEST_SKIP() << "mpirun is not installed";
  const CommandResult r = run_command("mpirun --allow-run-as-root --oversubscribe -n 4 " +
                                      std::string(DDP_REGRESSION_BIN) + " --save ''");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  expect_close(values_of(r.out, "loss"), one_rank_losses(), 1e-4, "mpirun -n 4");
}

TEST(DdpRegression, ABatchThatDoesNotDivideFailsOnEveryRank) {
  const CommandResult r =
      run_command(std::string(CHORUS_RUN_BIN) + " -n 3 " + DDP_REGRESSION_BIN + " --batch 128");
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("--batch 128 does not divide over 3 ranks"), std::string::npos) << r.out;
}

TEST(GptZero, Stage3OnTwoRanksMatchesOneProcess) {
  const std::string flags =
      " --steps 6 --layers 2 --width 32 --heads 2 --context 32 --batch 4 "
      "--log-every 1";
  const CommandResult one = run_command(std::string(GPT_ZERO_BIN) + " --zero 0" + flags);
  ASSERT_EQ(one.exit_code, 0) << one.out;
  const std::vector<double> ref = values_of(one.out, "loss");
  ASSERT_EQ(ref.size(), 6u) << one.out;
  EXPECT_LT(ref.back(), ref.front()) << one.out;
  for (int stage : {1, 3}) {
    const CommandResult r = run_command(std::string(CHORUS_RUN_BIN) + " -n 2 " + GPT_ZERO_BIN +
                                        " --zero " + std::to_string(stage) + flags);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    expect_close(values_of(r.out, "loss"), ref, 1e-4, "zero " + std::to_string(stage));
  }
}

}  // namespace
}  // namespace chorus::testing
