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
    int local_rank = 0;
    try {
      local_rank = detect_launch_env().local_rank;
    } catch (const std::exception&) {
    }
    if (gpus > 0) d = tensor::Device::cuda(local_rank % gpus);
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

}  // namespace

int run(const Options& o, const Mesh& m, Communicator& world) {
  const bool root = world.rank() == 0;
  const tensor::Device device = training_device(o);
  const int threads = compute_threads(o);
  tensor::set_num_threads(threads);
  parallel::DeviceMesh mesh(world, {.dp = m.dp, .tp = m.tp, .pp = m.pp});
  Communicator& dp = mesh.dp();
  const tensor::ByteCorpus corpus =
      o.data.empty() ? tensor::ByteCorpus(builtin_corpus()) : tensor::ByteCorpus::from_file(o.data);
  CHORUS_ARG_CHECK(corpus.size() > o.context + 1, "chorus-train: the corpus has ", corpus.size(),
                   " bytes, fewer than --context ", o.context, " + 1");
  const tensor::BatchSampler sampler(corpus, o.batch, o.context, o.seed);
  const tensor::nn::GPTConfig cfg{.vocab = o.vocab,
                                  .context = o.context,
                                  .layers = o.layers,
                                  .heads = o.heads,
                                  .width = o.width,
                                  .experts = o.experts,
                                  .top_k = o.top_k,
                                  .moe_every = o.moe_every,
                                  .capacity_factor = o.capacity_factor,
                                  .aux_loss_coef = o.aux_loss_coef,
                                  .z_loss_coef = o.z_loss_coef};
  tensor::nn::GPT model(cfg);
  model.init(o.seed);
  const int64_t params_total = model.num_parameters();
  model.set_activation_checkpointing(o.checkpoint_activations);
  if (m.tp > 1) parallel::tensor_parallel(model, mesh.tp());
  // Experts on more than one rank: ep groups of consecutive dp ranks share each MoE layer's
  // experts (E/ep each); the dp/ep ranks holding the same experts form an expert-data-parallel
  // group. DDP reduces the rest over dp; the experts' gradients, which already hold every token
  // of their ep group, are summed over that group after backward. Under ZeRO (stages 1-2) the
  // rest is sharded over dp and the experts over their expert-data-parallel group (their
  // optimizer state split among the ranks holding the same experts, as DeepSpeed-MoE does).
  const bool split_experts = o.experts > 0 && m.dp > 1;
  auto is_expert = [](const std::string& name) {
    return name.find(".mlp.experts.") != std::string::npos;
  };
  std::optional<Communicator> ep_group, expert_dp;
  if (split_experts) {
    ep_group =
        dp.split(dp.rank() / m.ep, dp.rank(), "ep group " + std::to_string(dp.rank() / m.ep));
    expert_dp = dp.split(dp.rank() % m.ep, dp.rank(),
                         "expert-dp group " + std::to_string(dp.rank() % m.ep));
    if (m.ep > 1) parallel::expert_parallel(model, *ep_group);
  }
  // Deterministic with ep > 1: each expert's sources apart, folded after every backward in the
  // global batch's order on every replica (expert_parallel.h), so nothing is reduced after.
  const bool experts_apart = split_experts && m.ep > 1 && dp.deterministic();
  if (experts_apart) parallel::keep_expert_sources_apart(model);
  model.to(device);  // before any wrapper binds buffers to the parameters
  std::unique_ptr<parallel::PipelineEngine> pipe;
  std::function<bool(const std::string&)> include;
  // Every micro-batch's loss is scaled by 1 / (the step's micro-batches over all replicas) and
  // the replicas' gradients summed: the mean over the global batch, computed as one process
  // accumulating the same micro-batches computes it.
  const int global_micro = m.dp * m.micro_batches;
  const double loss_scale = 1.0 / global_micro;
  if (m.pp > 1) {
    pipe = std::make_unique<parallel::PipelineEngine>(
        model, mesh,
        parallel::PipelineOptions{.schedule = o.schedule,
                                  .chunks = m.chunks,
                                  .micro_batches = m.micro_batches,
                                  .balance = o.balance,
                                  .loss_scale = loss_scale});
    include = [&pipe](const std::string& name) { return pipe->owns(name); };
  }
  // The experts are reduced apart (a pipeline stage: its own experts).
  std::function<bool(const std::string&)> own = include;
  auto experts_only = [own, is_expert](const std::string& name) {
    return is_expert(name) && (!own || own(name));
  };
  if (split_experts)
    include = [own, is_expert](const std::string& name) {
      return !is_expert(name) && (!own || own(name));
    };
  const tensor::optim::AdamWOptions adamw{.lr = o.lr, .weight_decay = o.weight_decay};
  std::unique_ptr<parallel::DistributedDataParallel> ddp;
  std::unique_ptr<tensor::optim::AdamW> opt, expert_opt;
  std::unique_ptr<parallel::ZeroOptimizer> zero, expert_zero;
  if (o.zero == 0) {
    ddp = std::make_unique<parallel::DistributedDataParallel>(
        model, dp,
        parallel::DDPOptions{
            .average = false,
            .include = include,
            .may_be_unused =
                o.experts > 0 ? std::function<bool(const std::string&)>(is_expert) : nullptr});
    tensor::nn::NamedTensors params = pipe ? pipe->parameters() : model.named_parameters();
    if (split_experts) {
      tensor::nn::NamedTensors rest, experts;
      for (auto& named : params) (is_expert(named.first) ? experts : rest).push_back(named);
      params = std::move(rest);
      expert_opt = std::make_unique<tensor::optim::AdamW>(std::move(experts), adamw);
    }
    opt = std::make_unique<tensor::optim::AdamW>(std::move(params), adamw);
    ddp->attach(*opt);
  } else {
    zero = std::make_unique<parallel::ZeroOptimizer>(
        model, dp,
        parallel::ZeroOptions{
            .stage = o.zero,
            .adamw = adamw,
            .average = false,
            .include = include,
            .shard_group = o.zero_group == -1 ? parallel::ZeroOptions::kHostGroup : o.zero_group,
            .may_be_unused =
                o.experts > 0 ? std::function<bool(const std::string&)>(is_expert) : nullptr});
    // The experts in one bucket: it is reduced once every expert's gradient is final (an idle
    // expert's at the end of backward), so no rank waits inside backward for a reduction that
    // another rank only starts after its remaining ep exchanges.
    if (split_experts)
      expert_zero = std::make_unique<parallel::ZeroOptimizer>(
          model, *expert_dp,
          parallel::ZeroOptions{.stage = o.zero,
                                .adamw = adamw,
                                .bucket_bytes = std::numeric_limits<size_t>::max(),
                                .first_bucket_bytes = std::numeric_limits<size_t>::max(),
                                .average = false,
                                .include = experts_only,
                                .may_be_unused = is_expert});
  }
  // "DDP", "ZeRO-2", or with hybrid sharding "ZeRO-2 sharded over groups of 2 (2 replicas)".
  std::string dp_scheme = o.zero == 0 ? "DDP" : "ZeRO-" + std::to_string(o.zero);
  if (zero && zero->shard_group_size() < m.dp)
    dp_scheme += " sharded over groups of " + std::to_string(zero->shard_group_size()) + " (" +
                 std::to_string(m.dp / zero->shard_group_size()) + " replicas)";
  const DataType autocast = o.dtype == "bf16"  ? DataType::kBF16
                            : o.dtype == "f16" ? DataType::kF16
                                               : DataType::kF32;
  std::optional<tensor::GradScaler> scaler;
  if (o.dtype == "f16") scaler.emplace();
  // The LR schedule's length: --lr-steps, else (resuming) the checkpoint's, else --steps.
  int64_t lr_steps = o.lr_steps > 0 ? o.lr_steps : o.steps;
  auto make_schedule = [&o](int64_t total) {
    return tensor::optim::CosineSchedule{
        .max_lr = o.lr,
        .min_lr = o.min_lr > 0 ? o.min_lr : o.lr / 10,
        .warmup = o.warmup >= 0 ? o.warmup : std::min<int64_t>(100, total / 10),
        .total = total};
  };
  tensor::optim::CosineSchedule schedule = make_schedule(lr_steps);
  // A replicated tensor-parallel parameter is counted by tp rank 0 only; every slice by its rank.
  const bool tp_rank0 = mesh.tp().rank() == 0;
  auto counted = [&](const std::string& name) {
    return tp_rank0 || parallel::is_tensor_parallel_slice(model, name);
  };

  world.barrier();
  double peak = gemm_peak_gflops(device, autocast);
  world.all_reduce(&peak, &peak, 1, DataType::kF64, ReduceOp::kSum);
  const double flops = step_flops(cfg, o.batch);
  const int64_t local = o.batch / m.dp, micro_rows = local / m.micro_batches;
  if (root) {
    std::printf(
        "chorus-train: GPT %lld parameters (%lld layers, width %lld, %lld heads, context "
        "%lld), %d ranks, %s\n",
        static_cast<long long>(params_total), static_cast<long long>(o.layers),
        static_cast<long long>(o.width), static_cast<long long>(o.heads),
        static_cast<long long>(o.context), world.size(),
        device.is_cpu() ? (std::to_string(threads) + " compute thread(s) each").c_str()
                        : ("rank 0 on " + tensor::to_string(device)).c_str());
    if (o.experts > 0) {
      int64_t moe_blocks = 0;
      for (int64_t i = 0; i < o.layers; ++i) moe_blocks += cfg.moe_block(i) ? 1 : 0;
      char capacity[64] = "dropless";
      if (o.capacity_factor > 0)
        std::snprintf(capacity, sizeof capacity, "capacity factor %g", o.capacity_factor);
      std::printf(
          "experts: %lld in each of %lld MoE block(s) of %lld, %lld per rank (ep=%d), top-%lld, "
          "%s; loss + %g x load balance + %g x router z-loss\n",
          static_cast<long long>(o.experts), static_cast<long long>(moe_blocks),
          static_cast<long long>(o.layers), static_cast<long long>(o.experts / m.ep), m.ep,
          static_cast<long long>(o.top_k), capacity, o.aux_loss_coef, o.z_loss_coef);
    }
    if (!m.reason.empty()) std::printf("%s\n", m.reason.c_str());
    std::printf(
        "mesh dp=%d tp=%d pp=%d (%s), %s%s, global batch %lld x %lld tokens = %d "
        "replica(s) x %d micro-batch(es) of %lld\n",
        m.dp, m.tp, m.pp, mesh.layout().c_str(), dp_scheme.c_str(),
        m.pp > 1 ? (", " + o.schedule + " pipeline").c_str() : "", static_cast<long long>(o.batch),
        static_cast<long long>(o.context), m.dp, m.micro_batches,
        static_cast<long long>(micro_rows));
    std::fflush(stdout);
  }
  // Resume: the checkpoint fills whatever this mesh holds (it reshards).
  // Split experts step in an AdamW of their own; their expert-data-parallel group splits them.
  parallel::CheckpointState ckpt{.model = &model,
                                 .mesh = &mesh,
                                 .optimizer = opt.get(),
                                 .zero = zero.get(),
                                 .pipeline = pipe.get(),
                                 .expert_optimizer = expert_opt.get(),
                                 .expert_replicas = expert_opt ? &*expert_dp : nullptr};
  int64_t first = 0;
  if (!o.load.empty()) {
    const parallel::CheckpointInfo info = parallel::load_checkpoint(o.load, ckpt);
    for (const auto& [key, mine] :
         {std::pair<std::string, double>{"seed", double(o.seed)}, {"batch", double(o.batch)}}) {
      auto it = info.scalars.find(key);
      CHORUS_ARG_CHECK(it == info.scalars.end() || it->second == mine, "chorus-train: --load ",
                       o.load, " was trained with --", key, " ", it->second, ", not ", mine,
                       " (the data would not continue)");
    }
    if (auto it = info.scalars.find("loss_scale"); it != info.scalars.end() && scaler)
      scaler.emplace(tensor::GradScalerOptions{.init_scale = it->second});
    if (pipe) pipe->sync_tied_weights();
    first = info.step;
    // The same curve goes on: the saved schedule's length unless --lr-steps says otherwise.
    if (auto it = info.scalars.find("lr_steps"); it != info.scalars.end() && o.lr_steps == 0) {
      lr_steps = static_cast<int64_t>(it->second);
      schedule = make_schedule(lr_steps);
    }
    if (root) {
      const std::string here = "dp=" + std::to_string(m.dp) + " tp=" + std::to_string(m.tp) +
                               " pp=" + std::to_string(m.pp) + " zero=" + std::to_string(o.zero) +
                               (expert_opt && m.ep > 1 ? " ep=" + std::to_string(m.ep) : "");
      std::printf(
          "resumed from %s at step %lld (saved at %s%s); the LR schedule spans %lld steps\n",
          o.load.c_str(), static_cast<long long>(first), info.saved_mesh.c_str(),
          info.saved_mesh == here ? "" : (", resharded to " + here).c_str(),
          static_cast<long long>(lr_steps));
    }
  }
  auto save = [&](int64_t next_step) {
    ckpt.step = next_step;
    ckpt.scalars = {
        {"seed", double(o.seed)}, {"batch", double(o.batch)}, {"lr_steps", double(lr_steps)}};
    if (scaler) ckpt.scalars["loss_scale"] = scaler->get_scale();
    parallel::save_checkpoint(o.save, ckpt);
    if (root)
      std::printf("saved %s at step %lld\n", o.save.c_str(), static_cast<long long>(next_step));
  };
  // The experts' gradients summed over their expert-data-parallel group (an expert no token
  // reached has no gradient: zeros, as DDP reduces an unused parameter; folded sources apart are
  // summed already). Deterministic at ep 1 with micro-batches, every micro-step folds
  // (fold_experts) as DDP does: the first rank keeps the running sum, the others start their next
  // contribution from zero (`last` false), so the sum adds the micro-batches in the global
  // batch's order.
  const bool fold_experts =
      expert_opt && !experts_apart && dp.deterministic() && m.micro_batches > 1;
  auto reduce_experts = [&](bool last) {
    for (const auto& [name, p] : expert_opt->params()) {
      Tensor t = p;
      if (!t.grad().defined()) t.set_grad(Tensor::zeros_like(t));
      if (expert_dp->size() > 1 && !experts_apart)
        expert_dp->all_reduce(t.grad().data_ptr(), t.grad().data_ptr(),
                              static_cast<size_t>(t.grad().numel()), t.grad().dtype(),
                              ReduceOp::kSum);
      if (!last && expert_dp->rank() != 0) t.mutable_grad().zero_();
    }
  };
  // The timeline: blocks, pipeline actions and waits, every communicator's collectives.
  std::unique_ptr<parallel::Tracer> tracer;
  std::vector<std::pair<std::string, Communicator*>> traced;
  if (!o.trace.empty()) {
    tracer = std::make_unique<parallel::Tracer>(world);
    tracer->instrument(model);
    traced = {{"dp", &dp}};
    if (m.tp > 1) traced.emplace_back("tp", &mesh.tp());
    if (m.pp > 1) {
      pipe->set_tracer(tracer.get());
      for (const auto& c : pipe->channels()) traced.push_back(c);
    }
    if (m.tp * m.pp > 1) traced.emplace_back("mp", &mesh.mp());
    if (m.ep > 1) traced.emplace_back("ep", &*ep_group);
  }
  std::unique_ptr<std::ofstream> json;
  if (root && !o.log_json.empty()) {
    json = std::make_unique<std::ofstream>(o.log_json);
    CHORUS_ARG_CHECK(json->good(), "chorus-train: cannot write --log-json ", o.log_json);
  }
  const bool bar = root && !o.quiet && ::isatty(STDOUT_FILENO) != 0;
  const auto start = Clock::now();
  // The engine's high-water mark over the steps (the set-up's transient copies left out): what
  // the run needs per rank, which chorus-plan predicts.
  tensor::reset_peak_memory();

  // The set-up's collectives (initial broadcasts, loading) are not part of any step.
  for (const auto& [label, c] : traced) tracer->skip(*c, label);
  for (int64_t step = first; step < o.steps; ++step) {
    const auto t0 = Clock::now();
    std::optional<parallel::Tracer::Span> step_span;
    if (tracer) step_span.emplace(tracer->span("step " + std::to_string(step)));
    const double lr = schedule.at(step);
    if (opt) opt->set_lr(lr);
    if (expert_opt) expert_opt->set_lr(lr);
    if (zero) zero->set_lr(lr);
    if (expert_zero) expert_zero->set_lr(lr);
    const auto [x_all, y_all] = sampler.batch(step);
    // The batch in dp x micro_batches micro-batches; replica r's k-th is number k * dp + r, so
    // that every micro-step takes the next dp of them in order (the order the folding reductions
    // of the deterministic mode add gradients in).
    auto micro = [&](int k) {
      const int64_t row = (static_cast<int64_t>(k) * m.dp + dp.rank()) * micro_rows;
      return std::make_pair(x_all.narrow(0, row, micro_rows).contiguous().to(device),
                            y_all.narrow(0, row, micro_rows).contiguous().to(device));
    };
    std::vector<double> micro_losses(static_cast<size_t>(m.micro_batches), 0.0);
    {
      std::optional<parallel::Tracer::Span> fb;
      if (tracer) fb.emplace(tracer->span("forward and backward"));
      // Accumulation without a reduction: whichever wrappers hold the gradients.
      struct Quiet {
        std::optional<parallel::NoSync> rest, experts;
      };
      auto no_sync = [&] {
        Quiet q;
        q.rest.emplace(ddp ? ddp->no_sync() : zero->no_sync());
        if (expert_zero) q.experts.emplace(expert_zero->no_sync());
        return q;
      };
      tensor::AutocastGuard guard(autocast);
      if (pipe) {
        pipe->forward_backward(micro, static_cast<uint64_t>(step),
                               [&](bool last, const std::function<void()>& backward) {
                                 if (last) return backward();
                                 const Quiet quiet = no_sync();
                                 backward();
                               });
        micro_losses = pipe->losses();
      } else {
        for (int k = 0; k < m.micro_batches; ++k) {
          std::optional<Quiet> quiet;
          if (k + 1 < m.micro_batches) quiet.emplace(no_sync());
          const auto [x, y] = micro(k);
          Tensor l = model.loss(x, y, static_cast<uint64_t>(step));
          if (global_micro > 1) l = tensor::scale(l, loss_scale);
          micro_losses[static_cast<size_t>(k)] = l.item();
          (scaler ? scaler->scale(l) : l).backward();
          if (experts_apart) parallel::fold_expert_gradients(model, *expert_dp);
          if (fold_experts && k + 1 < m.micro_batches) reduce_experts(false);
        }
      }
    }
    std::optional<parallel::Tracer::Span> update;
    if (tracer) update.emplace(tracer->span("gradient norm and optimizer"));
    // The global gradient norm, clipped (scaled gradients under f16: the threshold scales too).
    const double scale = scaler ? scaler->get_scale() : 1.0;
    double norm = 0;
    if (ddp && expert_opt) {
      opt->wait_grads();
      reduce_experts(true);
      // Every element once: the replicated parameters on dp rank 0, each expert on the first
      // rank of its expert-data-parallel group.
      tensor::nn::NamedTensors all = opt->params();
      for (const auto& named : expert_opt->params()) all.push_back(named);
      // Summed over the model-parallel ranks too (the world), a replicated tensor-parallel
      // parameter (an MoE layer's included) on tp rank 0.
      const bool first_replica = dp.rank() == 0, first_expert_copy = expert_dp->rank() == 0;
      norm = parallel::clip_grad_norm(
                 all, o.clip * scale, m.tp * m.pp > 1 ? world : dp,
                 [&](const std::string& name) {
                   return (is_expert(name) ? first_expert_copy : first_replica) && counted(name);
                 }) /
             scale;
    } else if (expert_zero) {
      // The shards: every element on exactly one rank of dp (the rest sharded over dp, each
      // expert over the ranks holding it), then over the model-parallel ranks as above. Norms that
      // do not clip (max 0) first finish both wrappers' reductions.
      zero->clip_grad_norm(0);
      expert_zero->clip_grad_norm(0);
      tensor::nn::NamedTensors all = zero->shard_optimizer().params();
      for (const auto& named : expert_zero->shard_optimizer().params()) all.push_back(named);
      norm = parallel::clip_grad_norm(all, o.clip, m.tp * m.pp > 1 ? world : dp, counted);
    } else if (ddp) {
      opt->wait_grads();
      norm = parallel::clip_grad_norm(opt->params(), o.clip * scale, mesh.mp(), counted) / scale;
    } else {
      norm = zero->clip_grad_norm(o.clip, m.tp * m.pp > 1 ? &mesh.mp() : nullptr, counted);
    }
    if (ddp) {
      if (scaler && expert_opt) {
        // A skipped step is skipped on every rank: the norm summed every rank's gradients, so
        // it is not finite everywhere when any rank saw an inf or nan in any expert.
        scaler->step({opt.get(), expert_opt.get()}, !std::isfinite(norm));
        scaler->update();
      } else if (scaler) {
        scaler->step(*opt);
        scaler->update();
      } else {
        opt->step();
        if (expert_opt) expert_opt->step();
      }
      opt->zero_grad();
      if (expert_opt) expert_opt->zero_grad();
    } else {
      zero->step();
      zero->zero_grad();
      if (expert_zero) {
        expert_zero->step();
        expert_zero->zero_grad();
      }
    }
    if (pipe) pipe->sync_tied_weights();
    update.reset();
    const double loss = global_loss(dp, micro_losses);
    step_span.reset();
    for (const auto& [label, c] : traced) tracer->collect(*c, label);
    const double step_s = seconds(t0);
    if (!o.save.empty() && o.save_every > 0 && (step + 1) % o.save_every == 0 && step + 1 < o.steps)
      save(step + 1);
    if (!root) continue;
    const double tokens_s = double(o.batch * o.context) / step_s;
    const double mfu = flops / step_s / (peak * 1e9);
    char line[256];
    std::snprintf(
        line, sizeof line,
        "step %lld loss %.4f grad_norm %.3f lr %.2e step_ms %.1f tokens/s %.0f mfu %.1f%%",
        static_cast<long long>(step), loss, norm, lr, 1e3 * step_s, tokens_s, 100 * mfu);
    if (bar) {
      const double done = double(step + 1 - first) / double(o.steps - first);
      const int width = 24, filled = static_cast<int>(done * width);
      const double eta = seconds(start) / done * (1 - done);
      std::printf("\r[%s%s] %lld/%lld loss %.4f %.0f tok/s ETA %s   ",
                  std::string(static_cast<size_t>(filled), '#').c_str(),
                  std::string(static_cast<size_t>(width - filled), '.').c_str(),
                  static_cast<long long>(step + 1), static_cast<long long>(o.steps), loss, tokens_s,
                  duration_text(eta).c_str());
      if (step + 1 == o.steps) std::printf("\n%s\n", line);
    } else if (!o.quiet) {
      std::printf("%s\n", line);
    }
    std::fflush(stdout);
    if (json)
      *json << "{\"step\": " << step << ", \"loss\": " << exact(loss)
            << ", \"grad_norm\": " << exact(norm) << ", \"lr\": " << exact(lr)
            << ", \"step_ms\": " << 1e3 * step_s << ", \"tokens_per_s\": " << tokens_s
            << ", \"mfu\": " << mfu << "}" << std::endl;
  }
  {
    // Every rank's peak and current bytes (tensor::memory_stats), written by rank 0.
    const tensor::MemoryStats mine = tensor::memory_stats(device);
    const int64_t sent[2] = {mine.peak_bytes, mine.current_bytes};
    std::vector<int64_t> all(2 * static_cast<size_t>(world.size()));
    world.all_gather(sent, all.data(), 2, DataType::kI64);
    if (root && !o.log_memory.empty()) {
      std::ofstream out(o.log_memory);
      CHORUS_ARG_CHECK(out.good(), "chorus-train: cannot write --log-memory ", o.log_memory);
      out << "{\"peak_bytes\": [";
      for (int r = 0; r < world.size(); ++r) out << (r ? ", " : "") << all[2 * size_t(r)];
      out << "], \"current_bytes\": [";
      for (int r = 0; r < world.size(); ++r) out << (r ? ", " : "") << all[2 * size_t(r) + 1];
      out << "]}" << std::endl;
    }
  }
  if (!o.save.empty()) save(std::max<int64_t>(o.steps, first));
  if (tracer) {
    tracer->write(o.trace);
    if (root)
      std::printf("trace written to %s (one track per rank and activity)\n", o.trace.c_str());
  }
  if (root && scaler)
    std::printf("loss scaling: %lld step(s) skipped, scale now %g\n",
                static_cast<long long>(scaler->skipped_steps()), scaler->get_scale());
  if (root)
    std::printf("done: %lld steps in %s; peak memory %.1f MiB on %s (rank 0's tensors)\n",
                static_cast<long long>(o.steps - first), duration_text(seconds(start)).c_str(),
                double(tensor::memory_stats(device).peak_bytes) / (1 << 20),
                tensor::to_string(device).c_str());
  return 0;
}

}  // namespace chorus::train
