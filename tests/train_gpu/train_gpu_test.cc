// chorus-train on a GPU (--device cuda), as a user runs it: one GPU process against the CPU on the
// same data; data parallelism (DDP, ZeRO 1 and 3), pipelines and their mixes at 2 and 4 ranks
// sharing one GPU, each against one GPU process (the deterministic mode: bit for bit, as on the
// CPU; tensor parallelism, whose arithmetic differs, within a tolerance); reruns bit-identical.
// Without a device every test skips with the reason. CHORUS_TRAIN_TEST_DEVICE=cpu runs the same
// comparisons with the CPU in the GPU's place (a check of the harness).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "chorus/tensor/device.h"
#include "run_command.h"
#include "train_output.h"

namespace chorus::testing {
namespace {

namespace fs = std::filesystem;

// The programs beside this one (the build's bin/, or the packed check's).
std::string beside(const std::string& program) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string();
  return dir.substr(0, dir.rfind('/') + 1) + program;
}

std::string train(int ranks, const std::string& flags) {
  const std::string bin = beside("chorus-train");
  return ranks == 1
             ? bin + " " + flags
             : beside("chorus-run") + " -n " + std::to_string(ranks) + " " + bin + " " + flags;
}

// The device the tests train on: cuda, or CHORUS_TRAIN_TEST_DEVICE.
std::string device() {
  const char* env = std::getenv("CHORUS_TRAIN_TEST_DEVICE");
  return env != nullptr && *env != '\0' ? env : "cuda";
}

class TrainGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device() != "cpu") {
      const std::string why = tensor::device_unavailable_reason(tensor::Device::cuda(0));
      if (!why.empty()) GTEST_SKIP() << "no GPU: " << why;
    }
    std::string t = (fs::temp_directory_path() / "chorus-train-gpu-XXXXXX").string();
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    dir_ = t;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // What a run saves, exported as one file of named tensors (the same file whatever the mesh);
  // empty on failure. `out` gets the run's output.
  std::string run_and_save(int ranks, const std::string& flags, std::string* out = nullptr) {
    fs::remove_all(dir_ + "/ckpt");
    const CommandResult r = run_command(train(ranks, flags + " --save " + dir_ + "/ckpt"));
    EXPECT_EQ(r.exit_code, 0) << flags << "\n" << r.out;
    if (out != nullptr) *out = r.out;
    if (r.exit_code != 0) return {};
    const CommandResult c = run_command(beside("chorus-train") + " --convert " + dir_ + "/ckpt " +
                                        dir_ + "/model.tensors");
    EXPECT_EQ(c.exit_code, 0) << c.out;
    return read_file(dir_ + "/model.tensors");
  }

  std::string dir_;
};

const std::string kModel = "--layers 3 --width 32 --heads 2 --context 16 --batch 8 ";

// f32 without TF32 on the GPU follows the CPU's losses closely: the kernels differ in the order
// of their sums only (relative 1e-5 over three steps).
TEST_F(TrainGpu, OneGpuTracksTheCpu) {
  const std::string flags = kModel + "--steps 3 ";
  const CommandResult cpu = run_command(train(1, flags + "--device cpu"));
  const CommandResult gpu = run_command(train(1, flags + "--device " + device()));
  ASSERT_EQ(cpu.exit_code, 0) << cpu.out;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.out;
  if (device() != "cpu") {
    EXPECT_NE(gpu.out.find("rank 0 on cuda:0"), std::string::npos) << gpu.out;
  }
  const auto c = losses(cpu.out), g = losses(gpu.out);
  ASSERT_EQ(c.size(), 3u) << cpu.out;
  ASSERT_EQ(g.size(), 3u) << gpu.out;
  for (const auto& [step, loss] : c)
    EXPECT_NEAR(g.at(step), loss, 1e-5 * std::fabs(loss)) << "step " << step;
}

// The deterministic mode's promise on one GPU: with the same global batch in the same
// micro-batches, data parallelism (DDP, ZeRO 1 and 3) and pipelines at 2 and 4 ranks sharing the
// GPU save the one GPU process's bits.
TEST_F(TrainGpu, EveryMeshOnOneGpuSavesTheOneGpuBits) {
  const std::string flags = "--deterministic --device " + device() + " " + kModel + "--steps 2 ";
  const std::string one = run_and_save(1, flags + "--micro-batches 4");
  ASSERT_FALSE(one.empty());
  struct Mesh {
    int ranks;
    std::string flags;
  };
  for (const Mesh& m :
       {Mesh{2, "--dp 2 --micro-batches 2"}, Mesh{2, "--dp 2 --micro-batches 2 --zero 1"},
        Mesh{2, "--dp 2 --micro-batches 2 --zero 3"}, Mesh{2, "--pp 2 --micro-batches 4"},
        Mesh{4, "--dp 2 --pp 2 --micro-batches 2"}, Mesh{4, "--dp 4 --micro-batches 1 --zero 2"}})
    EXPECT_TRUE(run_and_save(m.ranks, flags + m.flags) == one)
        << m.flags << " saved other bits than one GPU process";
}

// Tensor parallelism splits the GEMMs' sums: within a tolerance of one GPU process.
TEST_F(TrainGpu, TensorParallelOnOneGpuTracksOneGpu) {
  const std::string flags = "--device " + device() + " " + kModel + "--steps 3 ";
  const CommandResult one = run_command(train(1, flags));
  ASSERT_EQ(one.exit_code, 0) << one.out;
  for (const std::string mesh : {"--tp 2", "--dp 2 --tp 2"}) {
    const int ranks = mesh == "--tp 2" ? 2 : 4;
    const CommandResult r = run_command(train(ranks, flags + mesh));
    ASSERT_EQ(r.exit_code, 0) << mesh << "\n" << r.out;
    const auto a = losses(one.out), b = losses(r.out);
    ASSERT_EQ(b.size(), a.size()) << r.out;
    for (const auto& [step, loss] : a)
      EXPECT_NEAR(b.at(step), loss, 1e-5 * std::fabs(loss)) << mesh << " step " << step;
  }
}

// Reruns of a mixed mesh under bf16 autocast save the same bits (pinned kernels, no atomics in
// any reduction, rank-ordered collectives).
TEST_F(TrainGpu, DeterministicRerunsSaveTheSameBits) {
  const std::string flags = "--deterministic --device " + device() + " --dtype bf16 " + kModel +
                            "--steps 2 --dp 2 --pp 2 --micro-batches 2";
  const std::string first = run_and_save(4, flags);
  ASSERT_FALSE(first.empty());
  for (int rerun = 1; rerun < 3; ++rerun)
    EXPECT_TRUE(run_and_save(4, flags) == first) << "rerun " << rerun << " saved other bits";
}

// A mixture of experts on the GPU: one process follows the CPU's losses, and its experts split
// over 2 ranks sharing the GPU (dp 2 x ep 2... as dp 2, ep 2) follow one GPU process taking the
// same micro-batches (the experts' sums are grouped otherwise: within 2e-4).
TEST_F(TrainGpu, MixtureOfExpertsTracksOneProcess) {
  const std::string flags = kModel + "--experts 4 --top-k 2 --steps 3 ";
  const CommandResult cpu = run_command(train(1, flags + "--micro-batches 2 --device cpu"));
  const CommandResult one = run_command(train(1, flags + "--micro-batches 2 --device " + device()));
  const CommandResult ep = run_command(train(2, flags + "--dp 2 --ep 2 --device " + device()));
  for (const CommandResult* r : {&cpu, &one, &ep}) ASSERT_EQ(r->exit_code, 0) << r->out;
  const auto c = losses(cpu.out), g = losses(one.out), e = losses(ep.out);
  ASSERT_EQ(c.size(), 3u) << cpu.out;
  for (const auto& [step, loss] : c) {
    EXPECT_NEAR(g.at(step), loss, 1e-5 * std::fabs(loss)) << "one GPU, step " << step;
    EXPECT_NEAR(e.at(step), g.at(step), 2e-4 * std::fabs(loss)) << "ep 2, step " << step;
  }
}

// A stop, a save and a resume at another mesh continue on the GPU from the saved state.
TEST_F(TrainGpu, ResumesOnAnotherMesh) {
  const std::string flags = "--deterministic --device " + device() + " " + kModel;
  const CommandResult whole = run_command(train(1, flags + "--steps 4 --micro-batches 2"));
  ASSERT_EQ(whole.exit_code, 0) << whole.out;
  const CommandResult first =
      run_command(train(2, flags + "--steps 2 --lr-steps 4 --dp 2 --save " + dir_ + "/half"));
  ASSERT_EQ(first.exit_code, 0) << first.out;
  const CommandResult rest =
      run_command(train(1, flags + "--steps 4 --micro-batches 2 --load " + dir_ + "/half"));
  ASSERT_EQ(rest.exit_code, 0) << rest.out;
  const auto a = losses(whole.out), b = losses(rest.out);
  for (int step : {2, 3}) EXPECT_EQ(b.at(step), a.at(step)) << "step " << step;
}

}  // namespace
}  // namespace chorus::testing
