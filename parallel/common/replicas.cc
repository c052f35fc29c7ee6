#include "chorus/parallel/replicas.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "chorus/error.h"
#include "chorus/parallel/data_parallel.h"
#include "chorus/parallel/expert_parallel.h"
#include "chorus/parallel/grad_norm.h"
#include "chorus/parallel/zero.h"
#include "chorus/tensor/device.h"
#include "common/tensor_comm.h"

namespace chorus::parallel {

using tensor::Tensor;

Replicas::Replicas(tensor::nn::GPT& model, DeviceMesh& mesh, tensor::nn::NamedTensors params,
                   ReplicasOptions options)
    : model_(model), mesh_(mesh), o_(std::move(options)) {
  CHORUS_ARG_CHECK(o_.zero_stage >= 0 && o_.zero_stage <= 3, "Replicas: zero_stage ", o_.zero_stage,
                   " is not 0 (DDP) or a ZeRO stage 1-3");
  CHORUS_ARG_CHECK(!o_.expert_replicas || o_.is_expert,
                   "Replicas: expert_replicas needs is_expert (which parameters are experts)");
  CHORUS_ARG_CHECK(!o_.scaler || o_.zero_stage == 0,
                   "Replicas: loss scaling (scaler) works with DDP only (zero_stage 0)");
  Communicator& dp = mesh_.dp();
  const bool split = o_.expert_replicas != nullptr;
  // The experts are reduced apart (a pipeline stage: its own experts).
  const NameFilter own = o_.include, is_expert = o_.is_expert;
  NameFilter include = own;
  if (split)
    include = [own, is_expert](const std::string& name) {
      return !is_expert(name) && (!own || own(name));
    };
  if (o_.zero_stage == 0) {
    DataParallelOptions ddp_options{
        .average = o_.average, .include = include, .may_be_unused = is_expert};
    if (o_.bucket_bytes > 0) ddp_options.bucket_bytes = o_.bucket_bytes;
    ddp_ = std::make_unique<DistributedDataParallel>(model_, dp, std::move(ddp_options));
    if (split) {
      tensor::nn::NamedTensors rest, experts;
      for (auto& named : params) (is_expert(named.first) ? experts : rest).push_back(named);
      params = std::move(rest);
      expert_opt_ = std::make_unique<tensor::optim::AdamW>(std::move(experts), o_.adamw);
    }
    opt_ = std::make_unique<tensor::optim::AdamW>(std::move(params), o_.adamw);
    ddp_->attach(*opt_);
    return;
  }
  ZeroOptions zero_options{.stage = o_.zero_stage,
                           .adamw = o_.adamw,
                           .average = o_.average,
                           .include = include,
                           .shard_group = o_.shard_group,
                           .may_be_unused = is_expert};
  if (o_.bucket_bytes > 0) zero_options.bucket_bytes = o_.bucket_bytes;
  zero_ = std::make_unique<ZeroOptimizer>(model_, dp, std::move(zero_options));
  if (!split) return;
  // Hybrid sharding: each expert is sharded over those of its ranks in one of the rest's shard
  // groups (a run of consecutive ranks of its expert-data-parallel group), replicated across.
  int expert_group = 0;
  if (o_.shard_group != 0) {
    Communicator& replicas = *o_.expert_replicas;
    const int group = zero_->shard_group_size();
    int32_t me = dp.rank();
    std::vector<int32_t> members(static_cast<size_t>(replicas.size()));
    replicas.all_gather(&me, members.data(), 1, DataType::kI32);
    expert_group = expert_shard_group({members.begin(), members.end()}, group);
    std::string ranks;
    for (const int32_t r : members) ranks += (ranks.empty() ? "" : " ") + std::to_string(r);
    CHORUS_ARG_CHECK(
        expert_group > 0, "Replicas: the ranks holding the same experts (dp ranks ", ranks,
        ") fall unevenly into the shard groups of ", group,
        " consecutive dp ranks; take a shard group that ep divides or that divides ep");
  }
  expert_zero_ = std::make_unique<ZeroOptimizer>(
      model_, *o_.expert_replicas,
      ZeroOptions{.stage = o_.zero_stage,
                  .adamw = o_.adamw,
                  .bucket_bytes = std::numeric_limits<size_t>::max(),
                  .first_bucket_bytes = std::numeric_limits<size_t>::max(),
                  .average = o_.average,
                  .include =
                      [own, is_expert](const std::string& name) {
                        return is_expert(name) && (!own || own(name));
                      },
                  .shard_group = expert_group,
                  .may_be_unused = is_expert,
                  .gradients_reduced = o_.experts_apart});
}

int expert_shard_group(const std::vector<int>& members, int group) {
  if (members.empty() || group < 1) return 0;
  // Runs of members in the same shard group: every group one run, every run as long.
  std::vector<int> runs, seen;
  for (size_t i = 0; i < members.size(); ++i) {
    const int g = members[i] / group;
    if (i > 0 && members[i - 1] / group == g) {
      ++runs.back();
      continue;
    }
    if (std::find(seen.begin(), seen.end(), g) != seen.end()) return 0;
    seen.push_back(g);
    runs.push_back(1);
  }
  for (const int run : runs)
    if (run != runs.front()) return 0;
  return runs.front();
}

Replicas::~Replicas() = default;

std::string Replicas::scheme() const {
  if (!zero_) return "DDP";
  std::string s = "ZeRO-" + std::to_string(zero_->stage());
  const int g = zero_->shard_group_size(), d = mesh_.dp().size();
  if (g < d)
    s += " sharded over groups of " + std::to_string(g) + " (" + std::to_string(d / g) +
         " replicas)";
  const int holders = o_.expert_replicas ? o_.expert_replicas->size() : 0;
  if (expert_zero_ && g < d && holders > 1)
    s += ", each expert over " + std::to_string(expert_zero_->shard_group_size()) + " of its " +
         std::to_string(holders) + " ranks";
  return s;
}

Replicas::Quiet Replicas::no_sync() {
  Quiet q;
  q.rest.emplace(ddp_ ? ddp_->no_sync() : zero_->no_sync());
  if (expert_zero_) q.experts.emplace(expert_zero_->no_sync());
  return q;
}

// The experts' gradients summed over their expert-data-parallel group (an expert no token
// reached has no gradient: zeros, as DDP reduces an unused parameter; folded sources apart are
// summed already). Not `last`: the first rank keeps the running sum, the others start their next
// contribution from zero, so the sum adds the micro-batches in the global batch's order.
// In the engine's order (common/tensor_comm.h): on a GPU, after the kernels that wrote them.
void Replicas::reduce_experts(bool last) {
  Communicator& group = *o_.expert_replicas;
  const tensor::nn::NamedTensors& params = expert_opt_->params();
  std::optional<TensorComm> ordered;
  if (group.size() > 1 && !o_.experts_apart)
    ordered.emplace(group, common_device(params, "Replicas"), CommOrder::kInline);
  for (const auto& [name, p] : params) {
    Tensor t = p;
    if (!t.grad().defined()) t.set_grad(Tensor::zeros_like(t));
    if (ordered)
      ordered->all_reduce(t.grad().data_ptr(), t.grad().data_ptr(),
                          static_cast<size_t>(t.grad().numel()), t.grad().dtype(), ReduceOp::kSum);
    if (!last && group.rank() != 0) t.mutable_grad().zero_();
  }
}

void Replicas::after_backward(bool last) {
  if (o_.experts_apart) fold_expert_gradients(model_, *o_.expert_replicas);
  // Deterministic at ep 1 with micro-batches: every micro-step folds, as DDP does.
  if (!last && expert_opt_ && !o_.experts_apart && mesh_.dp().deterministic())
    reduce_experts(false);
}

std::vector<double> Replicas::accumulate(int micro_batches,
                                         const std::function<double(int k)>& micro_step) {
  std::vector<double> losses(static_cast<size_t>(micro_batches), 0.0);
  for (int k = 0; k < micro_batches; ++k) {
    const bool last = k + 1 == micro_batches;
    std::optional<Quiet> quiet;
    if (!last) quiet.emplace(no_sync());
    losses[static_cast<size_t>(k)] = micro_step(k);
    after_backward(last);
  }
  return losses;
}

std::function<void(bool last, const std::function<void()>& backward)>
Replicas::pipeline_backward() {
  return [this](bool last, const std::function<void()>& backward) {
    std::optional<Quiet> quiet;
    if (!last) quiet.emplace(no_sync());
    backward();
    after_backward(last);
  };
}

double Replicas::finish_step(double max_norm) {
  Communicator& dp = mesh_.dp();
  const bool model_parallel = mesh_.mp().size() > 1;
  // Summed over the model-parallel ranks too (the world) when there are any.
  Communicator& everyone = model_parallel ? mesh_.world() : dp;
  const NameFilter& counted = o_.counted;
  auto counts = [&counted](const std::string& name) { return !counted || counted(name); };
  // Under f16 the gradients are scaled: so is the threshold.
  const double scale = o_.scaler ? o_.scaler->get_scale() : 1.0;
  double norm = 0;
  if (ddp_ && expert_opt_) {
    opt_->wait_grads();
    reduce_experts(true);
    // Every element once: the replicated parameters on dp rank 0, each expert on the first
    // rank of its expert-data-parallel group (a replicated tensor-parallel one on tp rank 0).
    tensor::nn::NamedTensors all = opt_->params();
    for (const auto& named : expert_opt_->params()) all.push_back(named);
    const bool first_replica = dp.rank() == 0, first_expert_copy = o_.expert_replicas->rank() == 0;
    norm = clip_grad_norm(all, max_norm * scale, everyone,
                          [&](const std::string& name) {
                            return (o_.is_expert(name) ? first_expert_copy : first_replica) &&
                                   counts(name);
                          }) /
           scale;
  } else if (expert_zero_) {
    // The shards: every element on exactly one rank of dp (the rest sharded over dp, each expert
    // over the ranks holding it; with hybrid sharding, on the first replica of the shards). Norms
    // that do not clip (max 0) first finish both reductions.
    zero_->clip_grad_norm(0);
    expert_zero_->clip_grad_norm(0);
    tensor::nn::NamedTensors all = zero_->shard_optimizer().params();
    for (const auto& named : expert_zero_->shard_optimizer().params()) all.push_back(named);
    // With hybrid sharding every shard has replicas: the first replica's are counted.
    const bool first_rest = zero_->replica() == 0, first_experts = expert_zero_->replica() == 0;
    norm = clip_grad_norm(all, max_norm, everyone, [&](const std::string& name) {
      return (o_.is_expert(name) ? first_experts : first_rest) && counts(name);
    });
  } else if (ddp_) {
    opt_->wait_grads();
    norm = clip_grad_norm(opt_->params(), max_norm * scale, mesh_.mp(), counted) / scale;
  } else {
    norm = zero_->clip_grad_norm(max_norm, model_parallel ? &mesh_.mp() : nullptr, counted);
  }
  if (ddp_) {
    if (o_.scaler && expert_opt_) {
      // A skipped step is skipped on every rank: the norm summed every rank's gradients, so it
      // is not finite everywhere when any rank saw an inf or nan in any expert.
      o_.scaler->step({opt_.get(), expert_opt_.get()}, !std::isfinite(norm));
      o_.scaler->update();
    } else if (o_.scaler) {
      o_.scaler->step(*opt_);
      o_.scaler->update();
    } else {
      opt_->step();
      if (expert_opt_) expert_opt_->step();
    }
    opt_->zero_grad();
    if (expert_opt_) expert_opt_->zero_grad();
  } else {
    zero_->step();
    zero_->zero_grad();
    if (expert_zero_) {
      expert_zero_->step();
      expert_zero_->zero_grad();
    }
  }
  return norm;
}

void Replicas::set_lr(double lr) {
  if (opt_) opt_->set_lr(lr);
  if (expert_opt_) expert_opt_->set_lr(lr);
  if (zero_) zero_->set_lr(lr);
  if (expert_zero_) expert_zero_->set_lr(lr);
}

Replicas::Memory Replicas::memory() const {
  Memory m;
  auto add = [&m](const ZeroOptimizer::Memory& z) {
    m.parameter_bytes += z.parameter_bytes;
    m.gradient_bytes += z.gradient_bytes;
    m.optimizer_bytes += z.optimizer_bytes;
  };
  auto bytes = [](const Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; };
  if (zero_) add(zero_->memory());
  if (expert_zero_) add(expert_zero_->memory());
  for (const auto* opt : {opt_.get(), expert_opt_.get()}) {
    if (opt == nullptr) continue;
    for (const auto& [name, p] : opt->params()) {
      m.parameter_bytes += bytes(p);
      m.gradient_bytes += bytes(p.grad());
    }
    for (const auto& [name, t] : opt->state_dict())
      if (name != "step") m.optimizer_bytes += bytes(t);
  }
  m.peak_bytes = tensor::memory_stats().peak_bytes;
  return m;
}

Replicas::Reductions Replicas::reductions() const {
  Reductions r;
  if (ddp_) {
    for (const auto& b : ddp_->buckets()) r.buckets.push_back({.numel = b.numel, .dtype = b.dtype});
    const DistributedDataParallel::Stats stats = ddp_->stats();
    r.started = stats.reductions;
    r.exposed_seconds = stats.exposed_seconds;
  } else {
    for (const auto& g : zero_->groups()) r.buckets.push_back({.numel = g.numel, .dtype = g.dtype});
  }
  return r;
}

void Replicas::bind(CheckpointState& state) {
  state.optimizer = opt_.get();
  state.zero = zero_.get();
  state.expert_optimizer = expert_opt_.get();
  state.expert_zero = expert_zero_.get();
  state.expert_replicas = experts_split() ? o_.expert_replicas : nullptr;
}

bool Replicas::experts_split() const { return expert_opt_ || expert_zero_; }

}  // namespace chorus::parallel
