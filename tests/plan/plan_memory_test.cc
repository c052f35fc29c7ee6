// chorus-plan's memory prediction against what chorus-train's ranks hold: a tiny model trained
// for two steps on 1 and 2 ranks (dp, tp, pp, ZeRO-1 to 3, activation checkpointing), every rank's
// engine peak and end-of-run bytes (--log-memory) next to the prediction for its stage; and a
// mixture of experts on one and two ranks (ep 1 and 2, DDP and ZeRO-1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "memory.h"
#include "run_command.h"

namespace chorus::plan {
namespace {

namespace fs = std::filesystem;

std::vector<double> numbers_after(const std::string& text, const std::string& key) {
  std::vector<double> out;
  const size_t at = text.find("\"" + key + "\": [");
  if (at == std::string::npos) return out;
  const size_t end = text.find(']', at);
  const std::string list = text.substr(text.find('[', at) + 1, end - text.find('[', at) - 1);
  const std::regex num("[0-9]+");
  for (auto it = std::sregex_iterator(list.begin(), list.end(), num); it != std::sregex_iterator();
       ++it)
    out.push_back(std::stod(it->str()));
  return out;
}

struct Case {
  int dp = 1, tp = 1, pp = 1, zero = 0, micro_batches = 1;
  bool checkpoint = false;
  int experts = 0, ep = 1;  // a mixture of experts, top-2 in every block
};

std::string name(const Case& c) {
  return "dp" + std::to_string(c.dp) + " tp" + std::to_string(c.tp) + " pp" + std::to_string(c.pp) +
         " zero" + std::to_string(c.zero) + " micro" + std::to_string(c.micro_batches) +
         (c.checkpoint ? " ckpt" : "") +
         (c.experts > 0 ? " experts" + std::to_string(c.experts) + " ep" + std::to_string(c.ep)
                        : "");
}

// Every rank's measured {peak, end} bytes, empty on failure.
std::pair<std::vector<double>, std::vector<double>> measure(const Case& c,
                                                            const std::string& file) {
  const int ranks = c.dp * c.tp * c.pp;
  const std::string flags =
      " --layers 4 --width 64 --heads 4 --context 32 --vocab 256 --batch 8 --steps 2 --quiet "
      "--threads 1 --dp " +
      std::to_string(c.dp) + " --tp " + std::to_string(c.tp) + " --pp " + std::to_string(c.pp) +
      " --zero " + std::to_string(c.zero) + " --micro-batches " + std::to_string(c.micro_batches) +
      (c.checkpoint ? " --checkpoint-activations" : "") +
      (c.experts > 0
           ? " --experts " + std::to_string(c.experts) + " --top-k 2 --ep " + std::to_string(c.ep)
           : "") +
      " --balance uniform --log-memory " + file;
  const std::string cmd = ranks == 1 ? CHORUS_TRAIN_BIN + flags
                                     : std::string(CHORUS_RUN_BIN) + " -n " +
                                           std::to_string(ranks) + " " + CHORUS_TRAIN_BIN + flags;
  const auto r = chorus::testing::run_command(cmd);
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.out;
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  return {numbers_after(text, "peak_bytes"), numbers_after(text, "current_bytes")};
}

TEST(PlanMemory, PredictsEveryRanksPeakAndModelStates) {
  chorus::plan::Setup s;
  s.model.layers = 4;
  s.model.width = 64;
  s.model.heads = 4;
  s.model.context = 32;
  s.model.vocab = 256;
  s.batch = 8;
  const std::vector<Case> cases = {
      {.dp = 1},
      {.dp = 1, .checkpoint = true},
      {.dp = 2},
      {.dp = 1, .tp = 2},
      {.dp = 1, .pp = 2, .micro_batches = 2},
      {.dp = 1, .pp = 2, .micro_batches = 4},
      {.dp = 2, .zero = 1},
      {.dp = 2, .zero = 2},
      {.dp = 2, .zero = 3},
      {.dp = 1, .experts = 4},
      {.dp = 2, .experts = 4},
      {.dp = 2, .experts = 4, .ep = 2},
      {.dp = 2, .zero = 1, .experts = 4, .ep = 2},
  };
  const std::string file =
      (fs::temp_directory_path() / ("chorus-plan-memory-" + std::to_string(::getpid()) + ".json"))
          .string();
  for (const Case& c : cases) {
    s.zero = c.zero;
    s.checkpoint_activations = c.checkpoint;
    s.model.experts = c.experts;
    s.model.top_k = c.experts > 0 ? 2 : 1;
    MeshChoice m{.dp = c.dp,
                 .tp = c.tp,
                 .pp = c.pp,
                 .micro_batches = c.micro_batches,
                 .micro_batch_size = s.batch / c.dp / c.micro_batches,
                 .chunks = 1};
    m.ep = c.ep;
    const auto [peak, held] = measure(c, file);
    ASSERT_EQ(peak.size(), size_t(c.dp * c.tp * c.pp)) << name(c);
    for (size_t r = 0; r < peak.size(); ++r) {
      const int stage = int(r) / (c.dp * c.tp);  // pp outermost
      const MemoryEstimate e = estimate_stage_memory(s, m, stage);
      const double states = e.parameters + e.gradients + e.optimizer + e.master;
      // After the last step a rank holds its model states (ZeRO-3: its shards) exactly.
      EXPECT_NEAR(held[r], states, 0.01 * states) << name(c) << " rank " << r;
      std::printf("%-28s rank %zu: peak %9.0f predicted %9.0f (%+.1f%%)\n", name(c).c_str(), r,
                  peak[r], e.peak, 100 * (e.peak / peak[r] - 1));
      // One known gap (docs/PLANNING.md): a pipeline's last stage at small micro-batches, where
      // the tied table's gradients in flight outweigh the activations (-7%), held within 10%.
      // And expert parallelism, where the estimate assumes balanced routing and the router sends
      // one rank more rows than the other (-4.8% and +2.2% at ep 2 here).
      const bool known_gap = (c.pp > 1 && stage == c.pp - 1 && c.micro_batches > c.pp) || c.ep > 1;
      EXPECT_NEAR(e.peak, peak[r], (known_gap ? 0.10 : 0.05) * peak[r]) << name(c) << " rank " << r;
    }
  }
  fs::remove(file);
}

}  // namespace
}  // namespace chorus::plan
