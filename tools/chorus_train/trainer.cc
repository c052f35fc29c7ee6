#include "trainer.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>

#include "chorus/error.h"
#include "chorus/launch_env.h"
#include "chorus/parallel/checkpoint.h"
#include "chorus/parallel/data_parallel.h"
#include "chorus/parallel/expert_parallel.h"
#include "chorus/parallel/grad_norm.h"
#include "chorus/parallel/mesh.h"
#include "chorus/parallel/pipeline.h"
#include "chorus/parallel/replicas.h"
#include "chorus/parallel/tensor_parallel.h"
#include "chorus/parallel/trace.h"
#include "chorus/parallel/zero.h"
#include "chorus/tensor/amp.h"
#include "chorus/tensor/autograd.h"
#include "chorus/tensor/data.h"
#include "chorus/tensor/device.h"
#include "chorus/tensor/gemm.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/optim.h"
#include "corpus.h"

namespace chorus::train {
namespace {

using tensor::Tensor;
using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The matmul FLOPs of one training step (forward and two backward GEMMs per weight, and the
// causal attention's two products), for the MFU estimate. An MoE block counts the weights a
// token meets: its router and top_k experts (tokens dropped over capacity are still counted).
double step_flops(const tensor::nn::GPTConfig& c, int64_t batch) {
  const double N = double(batch) * double(c.context), C = double(c.width);
  double total = 0;
  for (int64_t i = 0; i < c.layers; ++i) {
    const double mlp =
        c.moe_block(i) ? double(c.top_k) * 8 * C * C + C * double(c.experts) : 8 * C * C;
    total += N * (4 * C * C + mlp) + double(batch) * double(c.context) * double(c.context) * C;
  }
  return 6.0 * (total + N * C * double(c.vocab));
}

// This rank's GEMM rate (GFLOP/s), measured while every rank measures: on the CPU an f32 512^3
// product; on a GPU a 4096^3 product under the run's autocast dtype, timed to its end.
double gemm_peak_gflops(tensor::Device device, DataType autocast) {
  if (!device.is_cpu()) {
    const int64_t n = 4096;
    const Tensor a = Tensor::full({n, n}, 0.5, DataType::kF32, device);
    const Tensor b = Tensor::full({n, n}, 0.25, DataType::kF32, device);
    tensor::NoGradGuard no_grad;
    tensor::AutocastGuard guard(autocast);
    double best = 1e30;
    for (int rep = 0; rep < 4; ++rep) {
      tensor::synchronize(device);
      const auto t0 = Clock::now();
      const Tensor c = tensor::matmul(a, b);
      tensor::synchronize(device);
      if (rep > 0) best = std::min(best, seconds(t0));
    }
    return 2.0 * double(n * n * n) / best * 1e-9;
  }
  const int64_t n = 512;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = Clock::now();
    tensor::gemm(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    if (rep > 0) best = std::min(best, seconds(t0));
  }
  return 2.0 * double(n * n * n) / best * 1e-9;
}

std::string duration_text(double s) {
  const int64_t t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(t / 60),
                static_cast<long long>(t % 60));
  return buf;
}

// Compute threads per rank: --threads, else CHORUS_TENSOR_THREADS, else the cores this process
// may run on shared among the ranks on its host (ranks that share cores and each spawn a thread
// per core slow every synchronous collective down).
int compute_threads(const Options& o) {
  if (o.threads > 0) return o.threads;
  if (const char* env = std::getenv("CHORUS_TENSOR_THREADS"); env != nullptr && *env != '\0')
    return tensor::num_threads();
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const int cores = ::sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : 1;
  int local = 1;
  try {
    local = std::max(1, detect_launch_env().local_world_size);
  } catch (const std::exception&) {
  }
  return std::max(1, cores / local);
}

// This rank's device (--device): a GPU chosen by the local rank for "cuda", so that the ranks of
// a host spread over its GPUs (and share them when there are more ranks than GPUs).
tensor::Device training_device(const Options& o) {
  if (o.device == "cpu") return tensor::Device::cpu();
  tensor::Device d(o.device);
  if (o.device == "cuda") {
    const int gpus = tensor::device_count(tensor::DeviceType::kCUDA);
    if (gpus > 0) d = tensor::Device::cuda(local_device_index(gpus));
  }
  const std::string why = tensor::device_unavailable_reason(d);
  CHORUS_ARG_CHECK(why.empty(), "--device ", o.device, ": ", why);
  return d;
}

// The step's loss: the scaled losses of every replica's micro-batches, added in the order of
// the global batch (replica r's k-th is number k * dp + r), so that every mesh prints the bits
// one process accumulating the same micro-batches prints.
double global_loss(Communicator& dp, const std::vector<double>& mine) {
  const size_t m = mine.size(), n = static_cast<size_t>(dp.size());
  std::vector<double> all(m * n);
  dp.all_gather(mine.data(), all.data(), m, DataType::kF64);
  double loss = 0;
  for (size_t k = 0; k < m; ++k)
    for (size_t r = 0; r < n; ++r) loss += all[r * m + k];
  return loss;
}

// A double as JSON with the digits that read back to the same bits.
std::string exact(double v) {
  std::ostringstream os;
  os.precision(std::numeric_limits<double>::max_digits10);
  os << v;
  return os.str();
}

// One rank's run, in the order it happens: the model on the mesh (build_model), the pipeline,
// the data-parallel strategy (build_replicas: parallel::Replicas, whichever stage), the header,
// resuming, the steps (train_step, log_step), and the end (finish).
class Trainer {
 public:
  Trainer(const Options& o, const Mesh& m, Communicator& world);
  int run();

 private:
  struct StepResult {
    double lr = 0, loss = 0, norm = 0, seconds = 0;
  };
  void build_model();
  void build_pipeline();  // and the experts' sources apart (after the measured cut)
  void build_replicas();
  void print_header();
  void resume();
  void save(int64_t next_step);
  void start_trace();
  std::vector<double> forward_backward(int64_t step);
  StepResult train_step(int64_t step);
  void log_step(int64_t step, const StepResult& r);
  void write_memory();
  void finish();

  const Options& o_;
  const Mesh& m_;
  Communicator& world_;
  const bool root_;
  const tensor::Device device_;
  const int threads_;
  parallel::DeviceMesh mesh_;
  Communicator& dp_;
  const tensor::ByteCorpus corpus_;
  const tensor::BatchSampler sampler_;
  const tensor::nn::GPTConfig cfg_;
  tensor::nn::GPT model_;
  const DataType autocast_;
  // Every micro-batch's loss is scaled by 1 / (the step's micro-batches over all replicas) and
  // the replicas' gradients summed: the mean over the global batch, computed as one process
  // accumulating the same micro-batches computes it.
  const int global_micro_;
  const double loss_scale_;
  const int64_t micro_rows_;
  // Experts split over dp (see build_model) and, deterministic at ep > 1, their sources apart.
  bool split_experts_ = false, experts_apart_ = false;
  std::optional<Communicator> ep_group_, expert_dp_;
  std::unique_ptr<parallel::PipelineEngine> pipe_;
  std::optional<tensor::GradScaler> scaler_;
  std::unique_ptr<parallel::Replicas> replicas_;
  int64_t lr_steps_ = 0;
  tensor::optim::CosineSchedule schedule_;
  parallel::CheckpointState ckpt_;
  int64_t first_ = 0;
  std::unique_ptr<parallel::Tracer> tracer_;
  std::vector<std::pair<std::string, Communicator*>> traced_;
  std::unique_ptr<std::ofstream> json_;
  int64_t params_total_ = 0;  // the whole model's, before any split
  double flops_ = 0, peak_ = 0;
  Clock::time_point start_;
};

bool is_expert(const std::string& name) { return name.find(".mlp.experts.") != std::string::npos; }

int set_threads(const Options& o) {
  const int threads = compute_threads(o);
  tensor::set_num_threads(threads);
  return threads;
}

tensor::ByteCorpus load_corpus(const Options& o) {
  tensor::ByteCorpus corpus =
      o.data.empty() ? tensor::ByteCorpus(builtin_corpus()) : tensor::ByteCorpus::from_file(o.data);
  CHORUS_ARG_CHECK(corpus.size() > o.context + 1, "chorus-train: the corpus has ", corpus.size(),
                   " bytes, fewer than --context ", o.context, " + 1");
  return corpus;
}

tensor::optim::CosineSchedule make_schedule(const Options& o, int64_t total) {
  return tensor::optim::CosineSchedule{
      .max_lr = o.lr,
      .min_lr = o.min_lr > 0 ? o.min_lr : o.lr / 10,
      .warmup = o.warmup >= 0 ? o.warmup : std::min<int64_t>(100, total / 10),
      .total = total};
}

Trainer::Trainer(const Options& o, const Mesh& m, Communicator& world)
    : o_(o),
      m_(m),
      world_(world),
      root_(world.rank() == 0),
      device_(training_device(o)),
      threads_(set_threads(o)),
      mesh_(world, {.dp = m.dp, .tp = m.tp, .pp = m.pp}),
      dp_(mesh_.dp()),
      corpus_(load_corpus(o)),
      sampler_(corpus_, o.batch, o.context, o.seed),
      cfg_{.vocab = o.vocab,
           .context = o.context,
           .layers = o.layers,
           .heads = o.heads,
           .width = o.width,
           .experts = o.experts,
           .top_k = o.top_k,
           .moe_every = o.moe_every,
           .capacity_factor = o.capacity_factor,
           .aux_loss_coef = o.aux_loss_coef,
           .z_loss_coef = o.z_loss_coef},
      model_(cfg_),
      autocast_(o.dtype == "bf16"  ? DataType::kBF16
                : o.dtype == "f16" ? DataType::kF16
                                   : DataType::kF32),
      global_micro_(m.dp * m.micro_batches),
      loss_scale_(1.0 / global_micro_),
      micro_rows_(o.batch / m.dp / m.micro_batches),
      // The LR schedule's length: --lr-steps, else (resuming) the checkpoint's, else --steps.
      lr_steps_(o.lr_steps > 0 ? o.lr_steps : o.steps),
      schedule_(make_schedule(o, lr_steps_)) {}

// The GPT on this rank: tensor-parallel slices, and experts on more than one rank: ep groups of
// consecutive dp ranks share each MoE layer's experts (E/ep each); the dp/ep ranks holding the
// same experts form an expert-data-parallel group (Replicas reduces or shards them over it).
void Trainer::build_model() {
  model_.init(o_.seed);
  params_total_ = model_.num_parameters();
  model_.set_activation_checkpointing(o_.checkpoint_activations);
  if (m_.tp > 1) parallel::tensor_parallel(model_, mesh_.tp());
  split_experts_ = o_.experts > 0 && m_.dp > 1;
  if (split_experts_) {
    const int r = dp_.rank();
    ep_group_ = dp_.split(r / m_.ep, r, "ep group " + std::to_string(r / m_.ep));
    expert_dp_ = dp_.split(r % m_.ep, r, "expert-dp group " + std::to_string(r % m_.ep));
    if (m_.ep > 1) parallel::expert_parallel(model_, *ep_group_);
  }
  // Deterministic with ep > 1: each expert's sources apart, folded after every backward in the
  // global batch's order on every replica (expert_parallel.h), so nothing is reduced after (set
  // in build_pipeline).
  experts_apart_ = split_experts_ && m_.ep > 1 && dp_.deterministic();
  model_.to(device_);  // before any wrapper binds buffers to the parameters
}

void Trainer::build_pipeline() {
  if (m_.pp > 1)
    pipe_ = std::make_unique<parallel::PipelineEngine>(
        model_, mesh_,
        parallel::PipelineOptions{.schedule = o_.schedule,
                                  .chunks = m_.chunks,
                                  .micro_batches = m_.micro_batches,
                                  .balance = o_.balance,
                                  .loss_scale = loss_scale_});
  // After the measured cut's backwards, which nothing folds.
  if (experts_apart_) parallel::keep_expert_sources_apart(model_);
}

// DDP + AdamW or ZeRO over dp, the experts apart when split (parallel/replicas.h).
void Trainer::build_replicas() {
  if (o_.dtype == "f16") scaler_.emplace();
  // A replicated tensor-parallel parameter is counted by tp rank 0 only; every slice by its rank.
  const bool tp_rank0 = mesh_.tp().rank() == 0;
  parallel::PipelineEngine* pipe = pipe_.get();
  replicas_ = std::make_unique<parallel::Replicas>(
      model_, mesh_, pipe ? pipe->parameters() : model_.named_parameters(),
      parallel::ReplicasOptions{
          .zero_stage = o_.zero,
          .adamw = {.lr = o_.lr, .weight_decay = o_.weight_decay},
          .shard_group = o_.zero_group == -1 ? parallel::ZeroOptions::kHostGroup : o_.zero_group,
          .average = false,
          .include = pipe ? parallel::NameFilter(
                                [pipe](const std::string& name) { return pipe->owns(name); })
                          : nullptr,
          .is_expert = o_.experts > 0 ? parallel::NameFilter(is_expert) : nullptr,
          .expert_replicas = split_experts_ ? &*expert_dp_ : nullptr,
          .experts_apart = experts_apart_,
          .counted =
              [this, tp_rank0](const std::string& name) {
                return tp_rank0 || parallel::is_tensor_parallel_slice(model_, name);
              },
          .scaler = scaler_ ? &*scaler_ : nullptr});
}

void Trainer::print_header() {
  if (!root_) return;
  std::printf(
      "chorus-train: GPT %lld parameters (%lld layers, width %lld, %lld heads, context "
      "%lld), %d ranks, %s\n",
      static_cast<long long>(params_total_), static_cast<long long>(o_.layers),
      static_cast<long long>(o_.width), static_cast<long long>(o_.heads),
      static_cast<long long>(o_.context), world_.size(),
      device_.is_cpu() ? (std::to_string(threads_) + " compute thread(s) each").c_str()
                       : ("rank 0 on " + tensor::to_string(device_)).c_str());
  if (o_.experts > 0) {
    int64_t moe_blocks = 0;
    for (int64_t i = 0; i < o_.layers; ++i) moe_blocks += cfg_.moe_block(i) ? 1 : 0;
    char capacity[64] = "dropless";
    if (o_.capacity_factor > 0)
      std::snprintf(capacity, sizeof capacity, "capacity factor %g", o_.capacity_factor);
    std::printf(
        "experts: %lld in each of %lld MoE block(s) of %lld, %lld per rank (ep=%d), top-%lld, "
        "%s; loss + %g x load balance + %g x router z-loss\n",
        static_cast<long long>(o_.experts), static_cast<long long>(moe_blocks),
        static_cast<long long>(o_.layers), static_cast<long long>(o_.experts / m_.ep), m_.ep,
        static_cast<long long>(o_.top_k), capacity, o_.aux_loss_coef, o_.z_loss_coef);
  }
  if (!m_.reason.empty()) std::printf("%s\n", m_.reason.c_str());
  std::printf(
      "mesh dp=%d tp=%d pp=%d (%s), %s%s, global batch %lld x %lld tokens = %d "
      "replica(s) x %d micro-batch(es) of %lld\n",
      m_.dp, m_.tp, m_.pp, mesh_.layout().c_str(), replicas_->scheme().c_str(),
      m_.pp > 1 ? (", " + o_.schedule + " pipeline").c_str() : "", static_cast<long long>(o_.batch),
      static_cast<long long>(o_.context), m_.dp, m_.micro_batches,
      static_cast<long long>(micro_rows_));
  std::fflush(stdout);
}

// The checkpoint fills whatever this mesh holds (it reshards); split experts step in an
// optimizer of their own, their expert-data-parallel group splitting them.
void Trainer::resume() {
  ckpt_ = {.model = &model_, .mesh = &mesh_, .pipeline = pipe_.get()};
  replicas_->bind(ckpt_);
  if (o_.load.empty()) return;
  const parallel::CheckpointInfo info = parallel::load_checkpoint(o_.load, ckpt_);
  for (const auto& [key, mine] :
       {std::pair<std::string, double>{"seed", double(o_.seed)}, {"batch", double(o_.batch)}}) {
    auto it = info.scalars.find(key);
    CHORUS_ARG_CHECK(it == info.scalars.end() || it->second == mine, "chorus-train: --load ",
                     o_.load, " was trained with --", key, " ", it->second, ", not ", mine,
                     " (the data would not continue)");
  }
  if (auto it = info.scalars.find("loss_scale"); it != info.scalars.end() && scaler_)
    scaler_.emplace(tensor::GradScalerOptions{.init_scale = it->second});
  if (pipe_) pipe_->sync_tied_weights();
  first_ = info.step;
  // The same curve goes on: the saved schedule's length unless --lr-steps says otherwise.
  if (auto it = info.scalars.find("lr_steps"); it != info.scalars.end() && o_.lr_steps == 0) {
    lr_steps_ = static_cast<int64_t>(it->second);
    schedule_ = make_schedule(o_, lr_steps_);
  }
  if (!root_) return;
  const std::string here =
      "dp=" + std::to_string(m_.dp) + " tp=" + std::to_string(m_.tp) +
      " pp=" + std::to_string(m_.pp) + " zero=" + std::to_string(o_.zero) +
      (ckpt_.expert_replicas && m_.ep > 1 ? " ep=" + std::to_string(m_.ep) : "");
  std::printf("resumed from %s at step %lld (saved at %s%s); the LR schedule spans %lld steps\n",
              o_.load.c_str(), static_cast<long long>(first_), info.saved_mesh.c_str(),
              info.saved_mesh == here ? "" : (", resharded to " + here).c_str(),
              static_cast<long long>(lr_steps_));
}

void Trainer::save(int64_t next_step) {
  ckpt_.step = next_step;
  ckpt_.scalars = {
      {"seed", double(o_.seed)}, {"batch", double(o_.batch)}, {"lr_steps", double(lr_steps_)}};
  if (scaler_) ckpt_.scalars["loss_scale"] = scaler_->get_scale();
  parallel::save_checkpoint(o_.save, ckpt_);
  if (root_)
    std::printf("saved %s at step %lld\n", o_.save.c_str(), static_cast<long long>(next_step));
}

// The timeline: blocks, pipeline actions and waits, every communicator's collectives.
void Trainer::start_trace() {
  if (o_.trace.empty()) return;
  tracer_ = std::make_unique<parallel::Tracer>(world_);
  tracer_->instrument(model_);
  traced_ = {{"dp", &dp_}};
  if (m_.tp > 1) traced_.emplace_back("tp", &mesh_.tp());
  if (m_.pp > 1) {
    pipe_->set_tracer(tracer_.get());
    for (const auto& c : pipe_->channels()) traced_.push_back(c);
  }
  if (m_.tp * m_.pp > 1) traced_.emplace_back("mp", &mesh_.mp());
  if (m_.ep > 1) traced_.emplace_back("ep", &*ep_group_);
}

// The step's micro-batches through the model, forward and backward; returns their scaled
// losses. The batch is cut in dp x micro_batches micro-batches; replica r's k-th is number
// k * dp + r, so that every micro-step takes the next dp of them in order (the order the folding
// reductions of the deterministic mode add gradients in).
std::vector<double> Trainer::forward_backward(int64_t step) {
  const auto [x_all, y_all] = sampler_.batch(step);
  auto micro = [&, &x = x_all, &y = y_all](int k) {
    const int64_t row = (static_cast<int64_t>(k) * m_.dp + dp_.rank()) * micro_rows_;
    return std::make_pair(x.narrow(0, row, micro_rows_).contiguous().to(device_),
                          y.narrow(0, row, micro_rows_).contiguous().to(device_));
  };
  tensor::AutocastGuard guard(autocast_);
  if (pipe_) {
    pipe_->forward_backward(micro, static_cast<uint64_t>(step), replicas_->pipeline_backward());
    return pipe_->losses();
  }
  return replicas_->accumulate(m_.micro_batches, [&](int k) {
    const auto [x, y] = micro(k);
    Tensor l = model_.loss(x, y, static_cast<uint64_t>(step));
    if (global_micro_ > 1) l = tensor::scale(l, loss_scale_);
    const double loss = l.item();
    (scaler_ ? scaler_->scale(l) : l).backward();
    return loss;
  });
}

Trainer::StepResult Trainer::train_step(int64_t step) {
  const auto t0 = Clock::now();
  std::optional<parallel::Tracer::Span> step_span;
  if (tracer_) step_span.emplace(tracer_->span("step " + std::to_string(step)));
  StepResult r;
  r.lr = schedule_.at(step);
  replicas_->set_lr(r.lr);
  std::vector<double> micro_losses;
  {
    std::optional<parallel::Tracer::Span> fb;
    if (tracer_) fb.emplace(tracer_->span("forward and backward"));
    micro_losses = forward_backward(step);
  }
  {
    std::optional<parallel::Tracer::Span> update;
    if (tracer_) update.emplace(tracer_->span("gradient norm and optimizer"));
    // The global gradient norm, clipped; the optimizers step; the gradients are zeroed.
    r.norm = replicas_->finish_step(o_.clip);
    if (pipe_) pipe_->sync_tied_weights();
  }
  r.loss = global_loss(dp_, micro_losses);
  step_span.reset();
  for (const auto& [label, c] : traced_) tracer_->collect(*c, label);
  r.seconds = seconds(t0);
  return r;
}

// Rank 0's line for the step: a progress bar on a terminal, else a line per step; --log-json.
void Trainer::log_step(int64_t step, const StepResult& r) {
  const double tokens_s = double(o_.batch * o_.context) / r.seconds;
  const double mfu = flops_ / r.seconds / (peak_ * 1e9);
  char line[256];
  std::snprintf(line, sizeof line,
                "step %lld loss %.4f grad_norm %.3f lr %.2e step_ms %.1f tokens/s %.0f mfu %.1f%%",
                static_cast<long long>(step), r.loss, r.norm, r.lr, 1e3 * r.seconds, tokens_s,
                100 * mfu);
  if (!o_.quiet && ::isatty(STDOUT_FILENO) != 0) {
    const double done = double(step + 1 - first_) / double(o_.steps - first_);
    const int width = 24, filled = static_cast<int>(done * width);
    const double eta = seconds(start_) / done * (1 - done);
    std::printf("\r[%s%s] %lld/%lld loss %.4f %.0f tok/s ETA %s   ",
                std::string(static_cast<size_t>(filled), '#').c_str(),
                std::string(static_cast<size_t>(width - filled), '.').c_str(),
                static_cast<long long>(step + 1), static_cast<long long>(o_.steps), r.loss,
                tokens_s, duration_text(eta).c_str());
    if (step + 1 == o_.steps) std::printf("\n%s\n", line);
  } else if (!o_.quiet) {
    std::printf("%s\n", line);
  }
  std::fflush(stdout);
  if (json_)
    *json_ << "{\"step\": " << step << ", \"loss\": " << exact(r.loss)
           << ", \"grad_norm\": " << exact(r.norm) << ", \"lr\": " << exact(r.lr)
           << ", \"step_ms\": " << 1e3 * r.seconds << ", \"tokens_per_s\": " << tokens_s
           << ", \"mfu\": " << mfu << "}" << std::endl;
}

// --log-memory: every rank's peak and current bytes (tensor::memory_stats), and what its
// replicas hold by kind (Replicas::memory), written by rank 0.
void Trainer::write_memory() {
  const tensor::MemoryStats mine = tensor::memory_stats(device_);
  const parallel::Replicas::Memory held = replicas_->memory();
  constexpr size_t kFields = 5;
  const int64_t sent[kFields] = {mine.peak_bytes, mine.current_bytes, held.parameter_bytes,
                                 held.gradient_bytes, held.optimizer_bytes};
  std::vector<int64_t> all(kFields * static_cast<size_t>(world_.size()));
  world_.all_gather(sent, all.data(), kFields, DataType::kI64);
  if (!root_ || o_.log_memory.empty()) return;
  std::ofstream out(o_.log_memory);
  CHORUS_ARG_CHECK(out.good(), "chorus-train: cannot write --log-memory ", o_.log_memory);
  const char* names[kFields] = {"peak_bytes", "current_bytes", "parameter_bytes", "gradient_bytes",
                                "optimizer_bytes"};
  for (size_t f = 0; f < kFields; ++f) {
    out << (f ? "], \"" : "{\"") << names[f] << "\": [";
    for (int r = 0; r < world_.size(); ++r) out << (r ? ", " : "") << all[kFields * size_t(r) + f];
  }
  out << "]}" << std::endl;
}

void Trainer::finish() {
  write_memory();
  if (!o_.save.empty()) save(std::max<int64_t>(o_.steps, first_));
  if (tracer_) {
    tracer_->write(o_.trace);
    if (root_)
      std::printf("trace written to %s (one track per rank and activity)\n", o_.trace.c_str());
  }
  if (root_ && scaler_)
    std::printf("loss scaling: %lld step(s) skipped, scale now %g\n",
                static_cast<long long>(scaler_->skipped_steps()), scaler_->get_scale());
  if (root_)
    std::printf("done: %lld steps in %s; peak memory %.1f MiB on %s (rank 0's tensors)\n",
                static_cast<long long>(o_.steps - first_), duration_text(seconds(start_)).c_str(),
                double(tensor::memory_stats(device_).peak_bytes) / (1 << 20),
                tensor::to_string(device_).c_str());
}

int Trainer::run() {
  build_model();
  build_pipeline();
  build_replicas();
  world_.barrier();
  peak_ = gemm_peak_gflops(device_, autocast_);
  world_.all_reduce(&peak_, &peak_, 1, DataType::kF64, ReduceOp::kSum);
  flops_ = step_flops(cfg_, o_.batch);
  print_header();
  resume();
  start_trace();
  if (root_ && !o_.log_json.empty()) {
    json_ = std::make_unique<std::ofstream>(o_.log_json);
    CHORUS_ARG_CHECK(json_->good(), "chorus-train: cannot write --log-json ", o_.log_json);
  }
  start_ = Clock::now();
  // The engine's high-water mark over the steps (the set-up's transient copies left out): what
  // the run needs per rank, which chorus-plan predicts.
  tensor::reset_peak_memory();
  // The set-up's collectives (initial broadcasts, loading) are not part of any step.
  for (const auto& [label, c] : traced_) tracer_->skip(*c, label);
  for (int64_t step = first_; step < o_.steps; ++step) {
    const StepResult r = train_step(step);
    if (!o_.save.empty() && o_.save_every > 0 && (step + 1) % o_.save_every == 0 &&
        step + 1 < o_.steps)
      save(step + 1);
    if (root_) log_step(step, r);
  }
  finish();
  return 0;
}

}  // namespace

int run(const Options& o, const Mesh& m, Communicator& world) { return Trainer(o, m, world).run(); }

}  // namespace chorus::train
