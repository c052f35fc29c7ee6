// ZeroOptimizer: the layout of groups and shards, the shard optimizer, step, state dicts.
#include "chorus/parallel/zero.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>

#include "chorus/error.h"
#include "chorus/kernels/cpu.h"
#include "chorus/log.h"
#include "chorus/tensor/autograd.h"
#include "chorus/tensor/optim.h"
#include "common/fault_injection.h"
#include "common/global_norm.h"
#include "common/kernel_agreement.h"
#include "common/replica_check.h"
#include "zero/zero_state.h"

namespace chorus::parallel {
namespace {

constexpr size_t kWholeGroup = SIZE_MAX / 4;  // a unit is one flat buffer, whatever its size

// The stage-3 units: the modules named in `paths`, or by default the GPT's blocks ("h.<i>"),
// or failing that every direct child.
std::vector<std::pair<std::string, tensor::nn::Module*>> resolve_units(
    tensor::nn::Module& model, const std::vector<std::string>& paths) {
  std::vector<std::pair<std::string, tensor::nn::Module*>> out;
  if (!paths.empty()) {
    for (const std::string& p : paths) {
      CHORUS_ARG_CHECK(!p.empty(), "ZeroOptimizer: a unit path is empty (the root is implied)");
      out.emplace_back(p, &model.module_at(p));
    }
    return out;
  }
  const std::regex block("h\\.[0-9]+");
  for (auto& [name, m] : model.named_modules())
    if (std::regex_match(name, block)) out.emplace_back(name, m);
  if (out.empty())
    for (auto& [name, m] : model.named_modules())
      if (!name.empty() && name.find('.') == std::string::npos && m->num_parameters() > 0)
        out.emplace_back(name, m);
  return out;
}

// The constructor's steps, in the order it takes them (collectives included: every rank runs
// them alike).

using Impl = ZeroOptimizer::Impl;

void check_options(const ZeroOptions& options) {
  CHORUS_ARG_CHECK(options.stage >= 1 && options.stage <= 3, "ZeroOptimizer: stage ", options.stage,
                   " (expected 1, 2 or 3)");
  CHORUS_ARG_CHECK(options.bucket_bytes > 0 && options.first_bucket_bytes > 0,
                   "ZeroOptimizer: bucket sizes must be positive");
}

// ZeroOptions::shard_group resolved to a size that divides dp.
int resolve_shard_group(Communicator& dp, const ZeroOptions& options) {
  const int group = options.shard_group == ZeroOptions::kHostGroup ? host_shard_group(dp)
                    : options.shard_group == 0                     ? dp.size()
                                                                   : options.shard_group;
  CHORUS_ARG_CHECK(group >= 1, "ZeroOptimizer: shard_group ", options.shard_group,
                   " (expected a positive size, 0 for all of dp or kHostGroup)");
  CHORUS_ARG_CHECK(dp.size() % group == 0, "ZeroOptimizer: shard_group ", group,
                   " does not divide the ", dp.size(),
                   " dp ranks (the shard groups are runs of consecutive dp ranks)");
  CHORUS_ARG_CHECK(!options.include || options.stage < 3,
                   "ZeroOptimizer: stage 3 gathers whole units and takes no parameter filter");
  CHORUS_ARG_CHECK(!options.gradients_reduced || (options.stage < 3 && !options.average),
                   "ZeroOptimizer: gradients_reduced works with stages 1-2 and average false");
  return group;
}

// The parameters `include` accepts, the same on every rank of dp (checked).
tensor::nn::NamedTensors included_parameters(tensor::nn::Module& model, Communicator& dp,
                                             const ZeroOptions& options) {
  tensor::nn::NamedTensors all;
  for (auto& [name, p] : model.named_parameters())
    if (!options.include || options.include(name)) all.emplace_back(name, p);
  check_same_parameters(dp, all, "ZeroOptimizer");
  return all;
}

// The shard group this rank cuts its shards over (all of dp, or with hybrid sharding its run of
// `group` consecutive dp ranks, the replicas of its shard joined by a group across), and the
// streams the reductions and gathers run on.
void connect_shard_groups(Impl& z, Communicator& dp, int group) {
  z.replicas = dp.size() / group;
  z.replica = dp.rank() / group;
  z.shard = &dp;
  if (z.replicas > 1) {
    // Shard group g: dp ranks gG .. gG+G-1; replica group i: the ranks of index i in theirs.
    const int index = dp.rank() % group;
    const int wrong = injected_fault() == Fault::kWrongGroup ? z.replica : 0;  // tests only
    z.shard_comm = dp.split(z.replica, index, "zero shard group " + std::to_string(z.replica));
    z.replica_comm =
        dp.split((index + wrong) % group, z.replica, "zero replica group " + std::to_string(index));
    z.shard = &*z.shard_comm;
    z.across.emplace(*z.replica_comm, z.device, CommOrder::kInline);
    z.dp_beside.emplace(dp, z.device, CommOrder::kOverlap);
  }
  z.ranks = z.shard->size();
  z.rank = z.shard->rank();
  z.beside.emplace(*z.shard, z.device, CommOrder::kOverlap);
  z.inline_.emplace(*z.shard, z.device, CommOrder::kInline);
}

// The parameters that train (requires_grad), each contiguous.
void take_trained_parameters(Impl& z, const tensor::nn::NamedTensors& all) {
  for (const auto& [name, p] : all)
    if (p.requires_grad()) {
      CHORUS_ARG_CHECK(p.is_contiguous(), "ZeroOptimizer: parameter '", name,
                       "' is not contiguous");
      z.names.push_back(name);
      z.params.push_back(p);
    }
}

// The groups: buckets in reverse registration order (stages 1-2), or units in the order their
// backward finishes, the root last (stage 3); and where each parameter lies in them.
void lay_out_groups(Impl& z, tensor::nn::Module& model) {
  const ZeroOptions& options = z.options;
  std::vector<ParamShape> shapes;
  for (const Tensor& p : z.params) shapes.push_back({p.dtype(), p.numel()});
  auto add_groups = [&](const FlatLayout& layout, const std::string& name, tensor::nn::Module* m) {
    for (const FlatBucket& b : layout.buckets) {
      ZeroGroup g;
      g.name = name.empty() && m == nullptr && options.stage < 3
                   ? "bucket " + std::to_string(z.groups.size())
                   : name;
      g.dtype = b.dtype;
      g.numel = b.numel;
      std::tie(g.lo, g.hi) = shard_range(b.numel, z.ranks, z.rank);
      g.slots = b.slots;
      g.module = m;
      z.groups.push_back(std::move(g));
    }
  };
  if (options.stage < 3) {
    std::vector<size_t> order;
    for (size_t i = z.params.size(); i-- > 0;) order.push_back(i);
    add_groups(
        plan_buckets(shapes, order, options.first_bucket_bytes, options.bucket_bytes, z.ranks), "",
        nullptr);
  } else {
    const auto units = resolve_units(model, options.units);
    std::vector<char> taken(z.params.size(), 0);
    std::vector<std::vector<size_t>> members(units.size());
    for (size_t u = 0; u < units.size(); ++u)
      for (auto& [n, t] : units[u].second->named_parameters())
        for (size_t i = 0; i < z.params.size(); ++i)
          if (z.params[i].impl() == t.impl()) {
            CHORUS_ARG_CHECK(!taken[i], "ZeroOptimizer: parameter '", z.names[i],
                             "' belongs to two units (", units[u].first, " and another)");
            taken[i] = 1;
            members[u].push_back(i);
          }
    std::vector<size_t> rest;
    for (size_t i = 0; i < z.params.size(); ++i)
      if (!taken[i]) rest.push_back(i);
    for (size_t u = units.size(); u-- > 0;) {
      const FlatLayout l = plan_buckets(shapes, members[u], kWholeGroup, kWholeGroup, z.ranks);
      CHORUS_ARG_CHECK(l.buckets.size() <= 1, "ZeroOptimizer: unit '", units[u].first,
                       "' mixes parameter dtypes");
      if (l.buckets.empty()) continue;  // a unit without parameters needs nothing
      z.forward_units.insert(z.forward_units.begin(), z.groups.size());
      add_groups(l, units[u].first, units[u].second);
    }
    const FlatLayout l = plan_buckets(shapes, rest, kWholeGroup, kWholeGroup, z.ranks);
    CHORUS_ARG_CHECK(l.buckets.size() <= 1,
                     "ZeroOptimizer: the parameters outside every unit mix dtypes");
    CHORUS_ARG_CHECK(!l.buckets.empty(),
                     "ZeroOptimizer: stage 3 needs parameters outside the "
                     "units (the model's own, gathered for the whole step)");
    z.root_unit = z.groups.size();
    add_groups(l, "", nullptr);
  }
  z.where.assign(z.params.size(), {SIZE_MAX, 0});
  for (size_t g = 0; g < z.groups.size(); ++g)
    for (size_t s = 0; s < z.groups[g].slots.size(); ++s)
      z.where[z.groups[g].slots[s].param] = {g, s};
}

// Parameters become views into their group's flat buffer; gradients follow the stage (stage 1:
// views into a full flat gradient, a gradient already there kept; 2-3: a shard of it; stage 3
// keeps only its shard of the parameters).
void move_into_flat_buffers(Impl& z) {
  const int stage = z.options.stage;
  tensor::NoGradGuard no_grad;
  for (ZeroGroup& g : z.groups) {
    g.flat_param = Tensor::zeros({g.numel}, g.dtype, z.device);
    for (const FlatSlot& s : g.slots) {
      Tensor& p = z.params[s.param];
      Tensor view = g.flat_param.narrow(0, s.offset, s.numel).view(p.shape());
      view.copy_(p);
      const Tensor old_grad = p.grad();
      p.set_data(view);
      p.set_grad({});
      if (stage == 1) {
        if (!g.flat_grad.defined()) g.flat_grad = Tensor::zeros({g.numel}, g.dtype, z.device);
        Tensor gv = g.flat_grad.narrow(0, s.offset, s.numel).view(p.shape());
        if (old_grad.defined()) gv.copy_(old_grad);
        p.bind_grad(gv);
      }
    }
    if (stage >= 2) g.shard_grad = Tensor::zeros({g.hi - g.lo}, g.dtype, z.device);
    if (stage == 3) {
      g.shard_param = g.flat_param.narrow(0, g.lo, g.hi - g.lo).clone();
      g.flat_param.storage()->release();
      g.params = ZeroGroup::Params::kReleased;
    } else {
      g.params = ZeroGroup::Params::kGathered;
    }
  }
}

// The shard optimizer: an AdamW over this rank's pieces, which decays what the unsharded one
// would (by the name and shape of the whole parameter).
void make_shard_optimizer(Impl& z) {
  const ZeroOptions& options = z.options;
  const int shift = injected_fault() == Fault::kShardShift ? 1 : 0;  // tests only
  tensor::nn::NamedTensors pieces;
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < z.params.size(); ++i) index_of[z.names[i]] = i;
  for (ZeroGroup& g : z.groups)
    for (const FlatSlot& s : g.slots) {
      int64_t a = std::max(g.lo, s.offset), b = std::min(g.hi, s.offset + s.numel);
      if (a >= b) continue;
      if (shift != 0 && b + shift <= (options.stage == 3 ? g.hi : g.numel)) {
        a += shift;
        b += shift;
      }
      Tensor pv = options.stage == 3 ? g.shard_param.narrow(0, a - g.lo, b - a)
                                     : g.flat_param.narrow(0, a, b - a);
      Tensor gv = options.stage == 1 ? g.flat_grad.narrow(0, a, b - a)
                                     : g.shard_grad.narrow(0, a - g.lo, b - a);
      pv.bind_grad(gv);
      pieces.emplace_back(z.names[s.param], pv);
    }
  tensor::optim::AdamWOptions adamw = options.adamw;
  const auto user_decays = options.adamw.decays;
  const bool matrices_only = options.adamw.decay_matrices_only;
  Impl* self = &z;
  adamw.decays = [self, index_of, user_decays, matrices_only](const std::string& name,
                                                              const Tensor&) {
    const Tensor& whole = self->params[index_of.at(name)];
    return user_decays ? user_decays(name, whole) : !matrices_only || whole.dim() >= 2;
  };
  z.optimizer = std::make_unique<tensor::optim::AdamW>(std::move(pieces), adamw);
}

// The bucket-ready protocol over the groups, and the hooks that drive it (stage 3: also the
// units' gathers around their forward and backward).
void install_hooks(Impl& z) {
  Impl* self = &z;
  std::vector<size_t> group_of;
  for (const auto& [g, slot] : z.where) group_of.push_back(g);
  z.readiness.emplace(
      "ZeroOptimizer", z.names, std::move(group_of), z.groups.size(), "it is reduced as zero",
      BucketReadiness::Owner{.open = [self] { self->open_step(); },
                             .unused = [self](size_t i) { self->unused_parameter(i); },
                             .final = [self](size_t g) { self->group_final(g); },
                             .launch = [self](size_t g) { self->launch(g); },
                             .finished = [self] { self->finish_backward(); }},
      z.options.may_be_unused);
  z.install_gradient_hooks();
  if (z.options.stage == 3) z.install_unit_hooks();
}

}  // namespace

ZeroOptimizer::ZeroOptimizer(tensor::nn::Module& model, Communicator& dp, ZeroOptions options)
    : impl_(std::make_unique<Impl>()) {
  check_options(options);
  Impl& z = *impl_;
  z.model = &model;
  z.dp = &dp;
  z.options = std::move(options);
  z.dp_ranks = dp.size();
  z.fold = dp.deterministic();
  const int group = resolve_shard_group(dp, z.options);
  const tensor::nn::NamedTensors all = included_parameters(model, dp, z.options);
  z.device = common_device(all, "ZeroOptimizer");
  connect_shard_groups(z, dp, group);
  if (z.options.broadcast_parameters) broadcast_parameters(dp, all);
  agree_on_kernels(dp);
  take_trained_parameters(z, all);
  lay_out_groups(z, model);
  move_into_flat_buffers(z);
  make_shard_optimizer(z);
  install_hooks(z);
  CHORUS_INFO(kLogPar, "ZeroOptimizer stage ", z.options.stage, ": ", z.params.size(),
              " parameters in ", z.groups.size(), z.options.stage == 3 ? " units" : " buckets",
              " over ", z.ranks, " ranks",
              z.replicas > 1 ? ", " + std::to_string(z.replicas) + " replicas of the shards" : "");
}

int host_shard_group(Communicator& dp) {
  // The bootstrap's host identity (Communicator::host_of): the one the transports decide
  // shared memory by.
  std::string by_rank;
  for (int r = 0; r < dp.size(); ++r)
    by_rank += (r == 0 ? "" : " ") + std::to_string(dp.host_of(r));
  // Runs of equal hosts: every host one run, every run as long.
  std::vector<std::pair<int, int>> runs;  // (host, dp ranks)
  for (int r = 0; r < dp.size(); ++r) {
    const int h = dp.host_of(r);
    if (runs.empty() || runs.back().first != h) {
      for (const auto& run : runs)
        CHORUS_ARG_CHECK(run.first != h, "ZeroOptimizer: shard group 'host': the dp ranks of host ",
                         h, " are not consecutive (the host of each dp rank: ", by_rank,
                         "); give the group's size instead");
      runs.emplace_back(h, 0);
    }
    ++runs.back().second;
  }
  for (const auto& [h, n] : runs)
    CHORUS_ARG_CHECK(n == runs.front().second, "ZeroOptimizer: shard group 'host': host ",
                     runs.front().first, " has ", runs.front().second, " dp ranks but host ", h,
                     " has ", n, " (the host of each dp rank: ", by_rank,
                     "); give the group's size instead");
  return runs.front().second;
}

ZeroOptimizer::~ZeroOptimizer() {
  Impl& z = *impl_;
  for (size_t i = 0; i < z.grad_hooks.size(); ++i)
    z.params[i].remove_grad_ready_hook(z.grad_hooks[i]);
  for (auto& [m, h] : z.module_hooks) m->remove_hook(h);
  for (ZeroGroup& g : z.groups) {
    try {
      if (g.reducing) g.reduce.wait();
      if (g.params == ZeroGroup::Params::kGathering) g.gather.wait();
    } catch (const std::exception& e) {  // never throw from a destructor
      CHORUS_WARN(kLogPar, "ZeroOptimizer: a collective failed during teardown: ", e.what());
    }
  }
}

int ZeroOptimizer::stage() const { return impl_->options.stage; }
int ZeroOptimizer::shard_group_size() const { return impl_->ranks; }
int ZeroOptimizer::replica() const { return impl_->replica; }
tensor::optim::AdamW& ZeroOptimizer::shard_optimizer() { return *impl_->optimizer; }

void ZeroOptimizer::step() {
  Impl& z = *impl_;
  z.finish_gradients();
  z.optimizer->step();
  if (z.options.stage == 3) return;  // the next forward gathers the updated shards
  std::vector<Work> gathers;
  for (ZeroGroup& g : z.groups) {
    auto* flat = static_cast<std::byte*>(g.flat_param.data_ptr());
    const size_t es = dtype_size(g.dtype);
    // In place: this rank's shard sits at [lo, hi) of the buffer it gathers into.
    gathers.push_back(z.beside->all_gather_async(flat + static_cast<size_t>(g.lo) * es, flat,
                                                 static_cast<size_t>(g.hi - g.lo), g.dtype));
  }
  for (Work& w : gathers) w.wait();
}

void ZeroOptimizer::zero_grad() {
  Impl& z = *impl_;
  z.wait_all_reduces();
  z.averaged = false;
  z.taken = false;
  for (ZeroGroup& g : z.groups) {
    if (z.options.stage == 1) {
      g.flat_grad.zero_();
    } else {
      g.shard_grad.zero_();
      g.shard_grad_fresh = true;
    }
  }
}

double ZeroOptimizer::lr() const { return impl_->optimizer->lr(); }
void ZeroOptimizer::set_lr(double lr) { impl_->optimizer->set_lr(lr); }
int64_t ZeroOptimizer::step_count() const { return impl_->optimizer->step_count(); }

double ZeroOptimizer::clip_grad_norm(double max_norm, Communicator* model_parallel,
                                     const std::function<bool(const std::string&)>& counted) {
  Impl& z = *impl_;
  z.finish_gradients();
  std::vector<Tensor> grads;
  for (const auto& [name, piece] : z.optimizer->params())
    if (!counted || counted(name)) grads.push_back(piece.grad());
  std::vector<Communicator*> groups{z.shard};  // each replica of the shards holds the whole
  if (model_parallel != nullptr) groups.push_back(model_parallel);
  const double norm = global_norm(grads, groups);
  if (max_norm <= 0 || !std::isfinite(norm) || norm <= max_norm) return norm;
  const double factor = max_norm / (norm + 1e-6);
  for (const auto& [name, piece] : z.optimizer->params())
    tensor::optim::scale_grad(piece.grad(), factor);
  return norm;
}

ZeroOptimizer::NoSync ZeroOptimizer::no_sync() { return NoSync(&impl_->no_sync_depth); }

tensor::nn::NamedTensors ZeroOptimizer::state_dict() {
  Impl& z = *impl_;
  tensor::nn::NamedTensors out;
  std::vector<Tensor> copies(z.params.size());
  for (size_t gi = 0; gi < z.groups.size(); ++gi) {
    ZeroGroup& g = z.groups[gi];
    const bool was_released = g.params == ZeroGroup::Params::kReleased;
    if (z.options.stage == 3) z.ensure_gathered(gi);
    for (const FlatSlot& s : g.slots) copies[s.param] = z.params[s.param].detach().clone();
    if (z.options.stage == 3 && was_released) z.release(gi);
  }
  for (size_t i = 0; i < z.params.size(); ++i) out.emplace_back(z.names[i], copies[i]);
  return out;
}

tensor::nn::NamedTensors ZeroOptimizer::optimizer_state_dict() {
  Impl& z = *impl_;
  // The shard optimizer's state, by piece: "<name>.exp_avg", "<name>.exp_avg_sq" (and masters).
  const tensor::nn::NamedTensors state = z.optimizer->state_dict();
  auto find = [&](const std::string& key) -> const Tensor* {
    for (const auto& [n, t] : state)
      if (n == key) return &t;
    return nullptr;
  };
  tensor::nn::NamedTensors out;
  for (const auto& [n, t] : state)
    if (n == "step") out.emplace_back(n, t.clone());
  for (const char* suffix : {".exp_avg", ".exp_avg_sq"}) {
    std::vector<Tensor> full(z.params.size());
    for (ZeroGroup& g : z.groups) {
      // This rank's shard of the state (f32: AdamW keeps it in the master dtype), gathered.
      const DataType sd = g.dtype == DataType::kF64 ? DataType::kF64 : DataType::kF32;
      Tensor shard = Tensor::zeros({g.hi - g.lo}, sd, z.device);
      for (const FlatSlot& s : g.slots) {
        const int64_t a = std::max(g.lo, s.offset), b = std::min(g.hi, s.offset + s.numel);
        if (a >= b) continue;
        if (const Tensor* piece = find(z.names[s.param] + suffix))
          shard.narrow(0, a - g.lo, b - a).copy_(*piece);
      }
      Tensor whole = Tensor::empty({g.numel}, sd, z.device);
      z.inline_->all_gather(shard.data_ptr(), whole.data_ptr(), static_cast<size_t>(g.hi - g.lo),
                            sd);
      for (const FlatSlot& s : g.slots)
        full[s.param] = whole.narrow(0, s.offset, s.numel).view(z.params[s.param].shape()).clone();
    }
    for (size_t i = 0; i < z.params.size(); ++i) out.emplace_back(z.names[i] + suffix, full[i]);
  }
  return out;
}

std::vector<ZeroOptimizer::ShardInfo> ZeroOptimizer::shard_layout() const {
  const Impl& z = *impl_;
  std::vector<ShardInfo> out;
  for (size_t i = 0; i < z.params.size(); ++i) {
    const auto [gi, si] = z.where[i];
    const ZeroGroup& g = z.groups[gi];
    const FlatSlot& s = g.slots[si];
    ShardInfo info;
    info.name = z.names[i];
    info.shape = z.params[i].shape();
    info.dtype = z.params[i].dtype();
    info.group = static_cast<int>(gi);
    info.offset = s.offset;
    info.numel = s.numel;
    const int64_t a = std::max(g.lo, s.offset), b = std::min(g.hi, s.offset + s.numel);
    info.owned_begin = a < b ? a - s.offset : 0;
    info.owned_end = a < b ? b - s.offset : 0;
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<ZeroOptimizer::GroupInfo> ZeroOptimizer::groups() const {
  std::vector<GroupInfo> out;
  for (const ZeroGroup& g : impl_->groups) out.push_back({g.name, g.dtype, g.numel, g.lo, g.hi});
  return out;
}

ZeroOptimizer::Memory ZeroOptimizer::memory() const {
  const Impl& z = *impl_;
  Memory m;
  auto bytes = [](const Tensor& t) {
    return t.defined() && !t.storage()->released() ? static_cast<int64_t>(t.nbytes()) : 0;
  };
  for (const ZeroGroup& g : z.groups) {
    m.parameter_bytes += bytes(g.flat_param) + bytes(g.shard_param);
    m.gradient_bytes += bytes(g.flat_grad) + bytes(g.shard_grad) + bytes(g.reduce_into) +
                        bytes(g.inbox) + bytes(g.outbox);
  }
  for (const auto& [n, t] : z.optimizer->state_dict())
    if (n != "step") m.optimizer_bytes += bytes(t);
  m.peak_bytes = tensor::memory_stats().peak_bytes;
  return m;
}

}  // namespace chorus::parallel
