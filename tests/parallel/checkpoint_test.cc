// Sharded checkpoints: a resumed run continues bit for bit at the same mesh and reshards to
// others; corrupt, truncated, partial and foreign checkpoints fail clearly; a failed save keeps
// the previous checkpoint; export and import round-trip.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "chorus/parallel/checkpoint.h"
#include "chorus/tensor/gemm.h"
#include "chorus/tensor/serialize.h"
#include "multiproc.h"
#include "training.h"

namespace chorus::testing {
namespace {

namespace fs = std::filesystem;

RunOptions deterministic_env() {
  RunOptions o;
  o.env["CHORUS_DETERMINISTIC"] = "1";
  o.env["CHORUS_TENSOR_THREADS"] = "1";
  return o;
}

std::string temp_dir() {
  std::string t = (fs::temp_directory_path() / "chorus-ckpt-XXXXXX").string();
  return ::mkdtemp(t.data()) != nullptr ? t : std::string();
}

int world_of(const Scheme& s, int dp) { return dp * s.tp * s.pp; }

TrainSpec base_spec() {
  TrainSpec spec;
  spec.model = {.vocab = 64, .context = 8, .layers = 4, .heads = 2, .width = 16};
  spec.steps = 4;
  spec.accumulation = 2;
  return spec;
}

// Runs `from` (on dp_from replicas) to step `save_after`, saving; then in fresh processes `to`
// (dp_to) from the checkpoint to the end. Both halves against the one-process reference: bit
// for bit when `exact`, else within 1e-5.
void resume(const Scheme& from, int dp_from, const Scheme& to, int dp_to, bool exact,
            int accumulation = 2) {
  TrainSpec spec = base_spec();
  spec.accumulation = accumulation;
  const std::string dir = temp_dir() + "/ckpt";
  tensor::set_num_threads(1);
  tensor::pin_gemm_choices();
  // The data-parallel width decides the data; both meshes must see the same batches.
  ASSERT_EQ(dp_from, dp_to) << "the tests resume with the same number of replicas";
  const TrainResult ref = reference_run(spec, dp_from);
  TrainSpec first = spec;
  first.save_dir = dir;
  first.save_after = 1;
  first.steps = 2;
  run_ranks(
      world_of(from, dp_from), [&](Communicator& w) { parallel_run(w, first, from); },
      deterministic_env());
  ASSERT_TRUE(fs::exists(dir + "/manifest.json"));
  TrainSpec second = spec;
  second.load_dir = dir;
  run_ranks(
      world_of(to, dp_to),
      [&](Communicator& w) {
        TrainResult got = parallel_run(w, second, to);
        TrainResult tail = ref;
        tail.losses.erase(tail.losses.begin(), tail.losses.begin() + 2);
        tail.optimizer_state.clear();
        got.optimizer_state.clear();
        if (exact) {
          EXPECT_EQ(first_bit_difference(got, tail), "") << from.name() << " -> " << to.name();
        } else {
          std::string where;
          EXPECT_LE(max_relative_difference(got, tail, &where), 1e-5)
              << from.name() << " -> " << to.name() << ": " << where;
        }
      },
      deterministic_env());
  fs::remove_all(fs::path(dir).parent_path());
}

TEST(Checkpoint, ResumesBitIdenticallyAtTheSameMesh) {
  resume(Scheme{0}, 2, Scheme{0}, 2, true);
  resume(Scheme{.zero_stage = 1}, 2, Scheme{.zero_stage = 1}, 2, true);
  resume(Scheme{.zero_stage = 3}, 2, Scheme{.zero_stage = 3}, 2, true);
  resume(Scheme{.pp = 2}, 1, Scheme{.pp = 2}, 1, true);
}

TEST(Checkpoint, ReshardsBetweenMeshes) {
  // Data and pipeline parallelism and ZeRO change no arithmetic: bit for bit across them (with
  // one micro-batch per step when ZeRO-2/3 is on one side: they reduce before accumulating).
  resume(Scheme{0}, 2, Scheme{.zero_stage = 1}, 2, true);
  resume(Scheme{.zero_stage = 3}, 2, Scheme{0}, 2, true, /*accumulation=*/1);
  resume(Scheme{.zero_stage = 1}, 2, Scheme{.zero_stage = 2}, 2, true, /*accumulation=*/1);
  resume(Scheme{.pp = 2}, 2, Scheme{.zero_stage = 1}, 2, true);
  resume(Scheme{0}, 2, Scheme{.pp = 2}, 2, true);
  // Tensor parallelism splits sums: to rounding.
  resume(Scheme{0}, 1, Scheme{.tp = 2}, 1, false);
  resume(Scheme{.tp = 2, .pp = 2}, 1, Scheme{.zero_stage = 1}, 1, false);
}

TEST(Checkpoint, HybridShardsSaveOneReplicaAndReshard) {
  // dp 4 in shard groups of 2: the first replica writes the shards, and any mesh reads them.
  resume(Scheme{.zero_stage = 2, .zero_group = 2}, 4, Scheme{.zero_stage = 1}, 4, true, 1);
  resume(Scheme{0}, 4, Scheme{.zero_stage = 3, .zero_group = 2}, 4, true, 1);
}

// A small checkpoint to break: DDP on 2 ranks, saved after step 0.
std::string small_checkpoint() {
  TrainSpec spec = base_spec();
  spec.steps = 1;
  spec.save_after = 0;
  spec.save_dir = temp_dir() + "/ckpt";
  run_ranks(
      2, [&](Communicator& w) { parallel_run(w, spec, Scheme{0}); }, deterministic_env());
  return spec.save_dir;
}

// The error of loading `dir` into base_spec()'s model (or `model`) on 2 ranks ("" if it loads).
std::string load_error(const std::string& dir, tensor::nn::GPTConfig model = base_spec().model) {
  std::string out;
  const std::string file = temp_dir() + "/error.txt";
  TrainSpec spec = base_spec();
  spec.model = model;
  spec.load_dir = dir;
  RunOptions o = deterministic_env();
  o.may_fail = {0, 1};
  run_ranks(
      2,
      [&](Communicator& w) {
        try {
          parallel_run(w, spec, Scheme{0});
        } catch (const std::exception& e) {
          if (w.rank() == 0) std::ofstream(file) << e.what();
          throw;
        }
      },
      o);
  std::ifstream in(file);
  std::getline(in, out);
  return out;
}

TEST(Checkpoint, BrokenCheckpointsFailNamingTheFile) {
  const std::string dir = small_checkpoint();
  const std::string copy = dir + "-copy";
  auto fresh = [&] {
    fs::remove_all(copy);
    fs::copy(dir, copy);
  };
  fresh();
  {  // One flipped byte.
    std::fstream f(copy + "/rank-00001.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    char c = 0;
    f.read(&c, 1);
    f.seekp(100);
    c = static_cast<char>(c ^ 0x40);
    f.write(&c, 1);
  }
  std::string e = load_error(copy);
  EXPECT_NE(e.find("rank-00001.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("checksum"), std::string::npos) << e;
  fresh();
  fs::resize_file(copy + "/rank-00000.bin", 64);
  e = load_error(copy);
  EXPECT_NE(e.find("rank-00000.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  fresh();
  fs::remove(copy + "/rank-00001.bin");
  e = load_error(copy);
  EXPECT_NE(e.find("rank-00001.bin is missing"), std::string::npos) << e;
  fresh();
  fs::remove(copy + "/manifest.json");
  e = load_error(copy);
  EXPECT_NE(e.find("no manifest.json"), std::string::npos) << e;
  tensor::nn::GPTConfig other = base_spec().model;
  other.width = 32;
  e = load_error(dir, other);
  EXPECT_NE(e.find("another model: width 16, this one has 32"), std::string::npos) << e;
  fs::remove_all(fs::path(dir).parent_path());
  fs::remove_all(copy);
}

TEST(Checkpoint, AFailedSaveKeepsThePreviousCheckpoint) {
  const std::string dir = small_checkpoint();
  const std::string manifest = [&] {
    std::ifstream in(dir + "/manifest.json");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  TrainSpec spec = base_spec();
  spec.steps = 2;
  spec.save_after = 1;
  spec.save_dir = dir;
  RunOptions o = deterministic_env();
  o.env["CHORUS_PARALLEL_FAULT"] = "checkpoint_write";
  o.may_fail = {0, 1};
  run_ranks(
      2,
      [&](Communicator& w) {
        try {
          parallel_run(w, spec, Scheme{0});
          ADD_FAILURE() << "the save went through";
        } catch (const Error& e) {
          // Every rank learns of rank 1's failure.
          EXPECT_NE(std::string(e.what()).find("rank 1: cannot write rank-00001.bin"),
                    std::string::npos)
              << e.what();
        }
      },
      o);
  std::ifstream in(dir + "/manifest.json");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), manifest);
  EXPECT_EQ(load_error(dir), "");
  fs::remove_all(fs::path(dir).parent_path());
}

TEST(Checkpoint, ExportsAndImportsOneFile) {
  const std::string dir = small_checkpoint();
  const std::string file = dir + ".tensors";
  parallel::export_checkpoint(dir, file);
  const tensor::nn::NamedTensors all = tensor::load_tensors(file);
  auto get = [&](const std::string& n) {
    for (const auto& [name, t] : all)
      if (name == n) return t;
    return tensor::Tensor();
  };
  ASSERT_TRUE(get("wte.weight").defined());
  EXPECT_EQ(get("wte.weight").shape(), (tensor::Shape{64, 16}));
  ASSERT_TRUE(get("h.3.mlp.c_fc.weight.exp_avg").defined());
  EXPECT_EQ(get("step").item(), 1.0);
  EXPECT_EQ(get("config.layers").item(), 4.0);
  // Imported back, it loads on another mesh.
  const std::string again = dir + "-imported";
  parallel::import_checkpoint(file, again);
  EXPECT_EQ(load_error(again), "");
  fs::remove_all(fs::path(dir).parent_path());
}

}  // namespace
}  // namespace chorus::testing
