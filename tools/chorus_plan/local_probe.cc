#include "local_probe.h"

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "chorus/cost_model.h"
#include "chorus/tensor/amp.h"
#include "chorus/tensor/gemm.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/ops.h"
#include "chorus/tensor/optim.h"
#include "chorus/tensor/random.h"
#include "chorus/tune_table.h"

namespace chorus::plan {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double gemm_flops() {
  const int64_t n = 512;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  tensor::set_num_threads(1);
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = Clock::now();
    tensor::gemm(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    if (rep > 0) best = std::min(best, since(t0));
  }
  return 2.0 * double(n * n * n) / best;
}

double copy_bytes_per_s() {
  const size_t bytes = size_t(64) << 20;
  std::vector<char> a(bytes, 1), b(bytes, 0);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::min(best, since(t0));
  }
  return double(bytes) / best;
}

}  // namespace

Cluster local_cluster() {
  Cluster c;
  c.name = "local";
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  c.per_node = ::sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : 1;
  c.device = "this CPU, one core per rank";
  const double memory = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  c.memory_bytes = memory / c.per_node;  // the ranks share the host's memory
  c.f32_flops = c.bf16_flops = gemm_flops();
  const double copy = copy_bytes_per_s();
  c.hbm_bytes_per_s = copy;
  c.source = "measured: f32 GEMM 512^3 on one thread";
  c.intra = {5e-6, copy / 2};
  std::string links =
      "; links: a 64 MiB copy's bandwidth / 2, 5 us per step (no cost model: CHORUS_TUNE=off)";
  try {
    if (tuning_enabled()) {
      auto costs = std::make_shared<const CostModel>();
      // Collectives: the selector's model (GroupCollectives). Point-to-point: the all-reduce
      // ring's constants at this host's rank count (else the nearest fitted) in its largest
      // size band (activations are megabytes), one step a message, else the model's defaults.
      const FittedCost* ring = nullptr;
      const auto entries = costs->entries();
      for (const auto& e : entries)
        if (e.link == "shm" && e.collective == "all_reduce" && e.algorithm == "ring" &&
            e.beta_us_per_mib > 0 &&
            (ring == nullptr ||
             std::pair(-std::abs(e.world_size - c.per_node), e.band_from_bytes) >
                 std::pair(-std::abs(ring->world_size - c.per_node), ring->band_from_bytes)))
          ring = &e;
      const double alpha_us = ring != nullptr ? ring->alpha_us : 2.0;
      const double beta_us_per_mib = ring != nullptr ? ring->beta_us_per_mib : 256.0;
      c.intra = {alpha_us * 1e-6, double(1 << 20) / (beta_us_per_mib * 1e-6)};
      links =
          "; collectives: the selector's cost model, " +
          (costs->fitted() ? "constants chorus-tune fitted per algorithm (" + costs->origin() + ")"
                           : std::string("its defaults (no chorus-tune constants)"));
      c.costs = std::move(costs);
    }
  } catch (const std::exception&) {
    // A malformed constants file: the probe's link stands.
  }
  c.source += links;
  c.inter = c.intra;
  c.compute_efficiency = 1;  // measured rates
  c.link_efficiency = 1;
  return c;
}

namespace {

// The model's shape with one layer (the blocks and the ends are timed on it).
tensor::nn::GPTConfig one_layer(const ModelShape& m) {
  tensor::nn::GPTConfig cfg;
  cfg.vocab = m.vocab;
  cfg.context = m.context;
  cfg.layers = 1;
  cfg.heads = m.heads;
  cfg.width = m.width;
  return cfg;
}

// n token ids spread over a vocabulary of `vocab` (a fixed stride: every pass sees the same).
std::vector<int64_t> token_ids(int64_t n, int64_t vocab) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7919) % vocab);
  return ids;
}

// While it lives, `n` copies of this process (fork) run `work` over and over on the other cores:
// a mesh's ranks compute at the same time, sharing the host's caches, memory bandwidth and
// clock, so the probe times its passes with every other core as busy as the run keeps it (none
// for one process). The copies are killed and reaped when it ends; a failed fork leaves fewer.
class BusyNeighbours {
 public:
  template <typename Work>
  BusyNeighbours(int n, Work&& work) {
    for (int i = 0; i < n; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        try {
          for (;;) work();
        } catch (...) {
        }
        ::_exit(0);
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~BusyNeighbours() {
    for (const pid_t pid : pids_) ::kill(pid, SIGKILL);
    for (const pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
  }
  BusyNeighbours(const BusyNeighbours&) = delete;
  BusyNeighbours& operator=(const BusyNeighbours&) = delete;

 private:
  std::vector<pid_t> pids_;
};

// Seconds of one forward and backward `pass` in the setup's precision, with `neighbours` other
// cores running the same pass (BusyNeighbours): the fastest of five after a warm-up. The host's
// other work only ever adds to a pass, so the fastest is its cost undisturbed (what
// bench/parallel/plan_vs_runs.py takes of a run's steps too). `before`, when given, runs untimed
// ahead of every pass (the neighbours run it too): what a step does before the timed part.
template <typename Pass, typename Before = void (*)()>
double fastest_pass(
    const Setup& s, int neighbours, Pass&& pass, Before&& before = [] {}) {
  const DataType lowp = s.dtype == "bf16"  ? DataType::kBF16
                        : s.dtype == "f16" ? DataType::kF16
                                           : DataType::kF32;
  auto timed = [&] {
    tensor::AutocastGuard autocast(lowp);
    pass();
  };
  const BusyNeighbours busy(neighbours, [&] {
    before();
    timed();
  });
  std::vector<double> t;
  for (int rep = 0; rep < 6; ++rep) {
    before();
    const auto t0 = Clock::now();
    timed();
    if (rep > 0) t.push_back(since(t0));
  }
  return *std::min_element(t.begin(), t.end());
}

// Seconds of one block's forward and backward on b sequences (fastest_pass); with tp > 1 the slice
// one rank of a tp split runs (parallel/tensor_parallel.h): the attention's heads and the MLP's
// hidden columns over tp, the LayerNorms and an MoE layer whole. The slice's all-reduces are not in
// it (the collectives price them). Timed as a stack of `depth` distinct blocks (the model's own
// count of its kind, up to four and 1 GiB of parameters), an MoE block's auxiliary losses
// back-propagated as the trainer's are: one block passed again and again keeps its weights and
// activations in the caches, which a model's pass does not (a mixture's block then ran 10% below
// its pass inside chorus-train on an Intel Xeon with AVX-512, a dense one 4%).
double time_block(const Setup& s, int64_t b, bool moe, int tp, int neighbours, int64_t depth) {
  const ModelShape& m = s.model;
  tensor::nn::GPTConfig cfg = one_layer(m);
  cfg.experts = moe ? m.experts : 0;
  cfg.top_k = m.top_k;
  cfg.capacity_factor = m.capacity_factor;
  const auto make_block = [&](uint64_t seed) {
    auto block = std::make_unique<tensor::nn::Block>(cfg, moe);
    if (tp > 1) {
      using tensor::nn::Linear;
      const int64_t c = m.width;
      block->replace_module("attn.c_attn", std::make_shared<Linear>(c, 3 * c / tp));
      block->replace_module("attn.c_proj", std::make_shared<Linear>(c / tp, c));
      block->attn->heads = m.heads / tp;
      if (!moe) {
        block->replace_module("mlp.c_fc", std::make_shared<Linear>(c, 4 * c / tp));
        block->replace_module("mlp.c_proj", std::make_shared<Linear>(4 * c / tp, c));
      }
    }
    block->init(seed);
    return block;
  };
  std::vector<std::unique_ptr<tensor::nn::Block>> blocks;
  blocks.push_back(make_block(1));
  constexpr int64_t kMaxDepth = 4, kMaxBytes = int64_t(1) << 30;
  const int64_t bytes = 4 * std::max<int64_t>(1, blocks[0]->num_parameters());
  const int64_t count = std::max<int64_t>(1, std::min({depth, kMaxDepth, kMaxBytes / bytes}));
  while (int64_t(blocks.size()) < count) blocks.push_back(make_block(1 + blocks.size()));
  tensor::Tensor x = tensor::Tensor::empty({b, m.context, m.width});
  tensor::fill_normal_(x, {1, 2}, 0.0, 1.0);
  x.set_requires_grad(true);
  const double seconds = fastest_pass(s, neighbours, [&] {
    std::vector<tensor::Tensor> aux;
    tensor::Tensor h = x;
    for (const auto& block : blocks) h = block->forward(h, {}, moe ? &aux : nullptr);
    tensor::Tensor loss = tensor::sum(h);
    for (const tensor::Tensor& a : aux) loss = tensor::add(loss, a);
    loss.backward();
  });
  return seconds / double(blocks.size());
}

// Seconds of the model's ends on b sequences, forward and backward (fastest_pass): the embeddings,
// the final LayerNorm, the tied logits and the cross-entropy, which the blocks' FLOP rate does not
// price well (a lookup and its scatter into the table, a softmax over the vocabulary). With
// tp > 1 the share one tp rank runs (parallel/tensor_parallel.h: the vocabulary-parallel table's
// V/tp rows, the logits' V/tp columns and the cross-entropy over them, the final LayerNorm
// whole), as a model of vocabulary V/tp; its all-reduces are left to the collectives.
double time_ends(const Setup& s, int64_t b, int tp, int neighbours) {
  const ModelShape& m = s.model;
  tensor::nn::GPTConfig cfg = one_layer(m);
  cfg.vocab = (m.vocab + tp - 1) / tp;
  tensor::nn::GPT gpt(cfg);
  gpt.init(1);
  const std::vector<int64_t> ids = token_ids(b * m.context, cfg.vocab);
  const tensor::Tensor idx = tensor::Tensor::from_vector(ids, {b, m.context});
  const tensor::Tensor targets = tensor::Tensor::from_vector(ids, {b * m.context});
  return fastest_pass(s, neighbours, [&] {
    const tensor::Tensor logits = gpt.head(gpt.embed(idx));
    gpt.wte->tied_loss(logits.view({b * m.context, logits.size(-1)}), targets).backward();
  });
}

// Seconds of the trainer's update (parallel/common/replicas.cc: the global gradient norm,
// clipped, then AdamW over every parameter one tensor at a time) on a model of `layers` of the
// model's blocks, its parameters in f32 (fastest_pass), each update timed right after a forward
// and backward of b sequences as in a step; `elements` gets its parameter count (2.1 to 2.4 ns a
// parameter on the grid's models, dense or a mixture, alone or beside a neighbour, AMD EPYC Zen
// 3, timed back to back).
double time_update(const Setup& s, int64_t layers, int64_t b, int neighbours, int64_t* elements) {
  const ModelShape& m = s.model;
  tensor::nn::GPTConfig cfg = one_layer(m);
  cfg.layers = layers;
  // The model's own blocks, a mixture's experts among them: the update's tensors and the memory
  // it streams through (a mixture's outgrow the caches, and the neighbours share the bandwidth).
  cfg.experts = m.experts;
  cfg.top_k = m.top_k;
  cfg.moe_every = m.moe_every;
  cfg.capacity_factor = m.capacity_factor;
  tensor::nn::GPT gpt(cfg);
  gpt.init(1);
  const tensor::Tensor idx =
      tensor::Tensor::from_vector(token_ids(b * m.context, m.vocab), {b, m.context});
  tensor::optim::AdamW adamw(gpt.named_parameters(), {});
  *elements = gpt.num_parameters();
  const Setup f32 = [&] {
    Setup copy = s;
    copy.dtype = "f32";
    return copy;
  }();
  // Each update follows a forward and backward, as in a step: the caches then hold the pass's
  // activations, not the parameters and moments the update streams (timed back to back, a
  // mixture's update ran 20-30% below its time in chorus-train on an Intel Xeon with AVX-512).
  return fastest_pass(
      f32, neighbours,
      [&] {
        tensor::optim::clip_grad_norm(adamw, 1.0);
        adamw.step();
      },
      [&] { gpt.loss(idx, idx, 0).backward(); });
}

// The update's time per parameter and per step, fitted through models of one and three of the
// model's blocks (an alpha-beta form, the part per step at least 0): one model's time per
// parameter, extrapolated, would overprice a larger model's update by what a step costs whatever
// its size (0.9 to 1.2 ms on the grid's model while the exact norm's passes ran one element at
// a time, about 40% of its update; none left since).
void time_optimizer(Cluster& c, const Setup& s, int64_t b, int neighbours) {
  int64_t n1 = 0, n3 = 0;
  const double t1 = time_update(s, 1, b, neighbours, &n1);
  const double t3 = time_update(s, 3, b, neighbours, &n3);
  c.optimizer_s_per_element = t3 > t1 && n3 > n1 ? (t3 - t1) / double(n3 - n1) : t3 / double(n3);
  c.optimizer_fixed_s = std::max(0.0, t1 - c.optimizer_s_per_element * double(n1));
}

}  // namespace

std::set<int64_t> local_micro_batch_sizes(const Setup& s, int world) {
  std::set<int64_t> sizes;
  if (s.micro_batch_size > 0) return {s.micro_batch_size};
  for (int dp = 1; dp <= world; ++dp) {
    if (world % dp != 0 || s.batch % dp != 0) continue;
    const int64_t local = s.batch / dp;
    if (s.micro_batches > 0) {
      if (local % s.micro_batches == 0) sizes.insert(local / s.micro_batches);
      continue;
    }
    for (int64_t k = 1; k <= local; ++k)
      if (local % k == 0) sizes.insert(local / k);
  }
  return sizes;
}

void calibrate_local(Cluster& c, const Setup& s) {
  const ModelShape& m = s.model;
  tensor::set_num_threads(1);
  // The blocks' FLOPs (model_flops' per-layer terms) over b sequences, dense and MoE blocks in the
  // model's proportion: the rate is the model's blocks' FLOPs over their time. A tp rank's FLOPs
  // are the blocks' over tp, an MoE layer's experts whole (what estimate_step divides by it).
  int64_t moe_blocks = 0;
  for (int64_t i = 0; i < m.layers; ++i) moe_blocks += m.moe_block(i) ? 1 : 0;
  const int64_t dense_blocks = m.layers - moe_blocks;
  ModelShape dense = m, moe = m;
  dense.layers = moe.layers = 1;
  dense.vocab = moe.vocab = 0;
  dense.experts = 0;
  moe.moe_every = 1;
  // A mesh of the host's cores runs its ranks at once: every pass is timed with the other cores
  // running the same one (BusyNeighbours); none for one process (--per-node 1).
  const int neighbours = c.world() - 1;
  std::string rates, ends;
  c.model_flops_per_s.clear();
  c.tp_flops_per_s.clear();
  c.ends_seconds.clear();
  c.tp_ends_seconds.clear();
  for (int tp = 1; tp <= c.world(); ++tp) {
    if (c.world() % tp != 0 || m.heads % tp != 0 || m.width % tp != 0) continue;
    std::string at;
    for (const int64_t b : local_micro_batch_sizes(s, c.world() / tp)) {
      const double tokens = double(b) * double(m.context);
      double flops = 0, seconds = 0;
      if (dense_blocks > 0) {
        flops += double(dense_blocks) * model_flops(dense, tokens) / tp;
        seconds += double(dense_blocks) * time_block(s, b, false, tp, neighbours, dense_blocks);
      }
      if (moe_blocks > 0) {
        const BlockFlops f = block_flops(moe, tokens, 0, 1);
        flops += double(moe_blocks) * (f.rest / tp + f.experts);
        seconds += double(moe_blocks) * time_block(s, b, true, tp, neighbours, moe_blocks);
      }
      (tp == 1 ? c.model_flops_per_s : c.tp_flops_per_s[tp])[b] = flops / seconds;
      const double end = time_ends(s, b, tp, neighbours);
      (tp == 1 ? c.ends_seconds : c.tp_ends_seconds[tp])[b] = end;
      ends += std::string(ends.empty() ? "" : ", ") +
              (tp > 1 ? "tp " + std::to_string(tp) + " " : "") + std::to_string(b) + ": " +
              std::to_string(end * 1e3).substr(0, 5);
      at += (at.empty() ? "" : ", ") + std::to_string(b) + ": " +
            std::to_string(static_cast<int64_t>(flops / seconds / 1e9));
    }
    rates += (rates.empty() ? "" : "; ") +
             std::string(tp > 1 ? "tp " + std::to_string(tp) + " " : "") + at;
  }
  time_optimizer(c, s, *local_micro_batch_sizes(s, c.world()).rbegin(), neighbours);
  c.source += std::string("; compute: the model's blocks") +
              (moe_blocks > 0 ? " (dense and MoE)" : "") +
              " forward and backward, whole and as a tp rank's slice, measured by micro-batch "
              "size in sequences, with " +
              std::to_string(neighbours) + " other core(s) running the same (GFLOP/s " + rates +
              "), its ends (embeddings, head, loss) by time (ms " + ends +
              "), and the update (gradient norm and AdamW) by time per step and per parameter (" +
              std::to_string(c.optimizer_fixed_s * 1e3).substr(0, 5) + " ms + " +
              std::to_string(c.optimizer_s_per_element * 1e9).substr(0, 5) + " ns)";
}

}  // namespace chorus::plan
