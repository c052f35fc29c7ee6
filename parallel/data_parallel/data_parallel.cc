// DistributedDataParallel: gradients bound into flat buckets, each bucket's all-reduce started
// from the grad-ready hook of its last gradient, the tail finished from the end of backward.
//
// Per backward (a "step"): the first hook that fires resets every bucket's count of gradients
// still to come and queues the finish on the engine; each hook counts its bucket down; buckets
// whose count reached zero start, strictly in bucket order (a bucket that is ready before an
// earlier one waits for it), so every rank issues the same all-reduces in the same order. The
// finish starts what never became ready (parameters without a gradient) and, unless an optimizer
// is attached, waits for everything.
//
// Folding (a deterministic group): every backward is reduced, so that the micro-batches'
// gradients are added in the order one process accumulating them adds them. Rank 0's buckets
// hold the running sum T; a backward adds its contribution to it (the engine's one addition per
// leaf), the other ranks' buckets hold only their own contribution c_r. A backward under
// no_sync() reduces onto rank 0 (rank-ordered: ((T + c_0) + c_1) + ... + c_{N-1}), waits, and
// zeroes the buckets of ranks >= 1 for the next contribution; the last backward all-reduces the
// same fold, so every rank ends with it.
#include "chorus/parallel/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include "chorus/error.h"
#include "chorus/log.h"
#include "chorus/tensor/autograd.h"
#include "common/bucket_readiness.h"
#include "common/fault_injection.h"
#include "common/flat_layout.h"
#include "common/kernel_agreement.h"
#include "common/replica_check.h"
#include "common/tensor_comm.h"

namespace chorus::parallel {

using tensor::Tensor;

struct DistributedDataParallel::Impl {
  tensor::nn::Module* module = nullptr;
  Communicator* group = nullptr;
  std::optional<TensorComm> comm;  // the buckets' reductions, beside backward on a GPU
  DataParallelOptions options;
  std::vector<std::string> names;  // parameters that require grad, registration order
  std::vector<Tensor> params;
  FlatLayout layout;
  std::vector<Tensor> flat;   // one gradient buffer per bucket
  std::vector<Tensor> views;  // per parameter: its gradient's view into its bucket

  // The step in progress: which buckets are final and launched (common/bucket_readiness.h).
  std::optional<BucketReadiness> readiness;
  std::vector<Work> work;       // per bucket
  std::vector<char> in_flight;  // per bucket: started and not yet waited for

  bool attached = false;
  int no_sync_depth = 0;
  bool fold = false;          // the group is deterministic: every backward reduces (see above)
  bool intermediate = false;  // the step in progress reduces onto rank 0 only (no_sync, fold)
  std::vector<int> hooks;     // grad-ready hook handles, per parameter
  int forward_hook = 0;
  Stats stats;

  void on_grad_ready(size_t i, Tensor& grad);
  void open_step();
  void launch(size_t b);
  void finish();
  void wait_bucket(size_t b);
  void wait_all();
};

void DistributedDataParallel::Impl::open_step() {
  wait_all();  // a previous step's reductions write the buckets this one accumulates into
  intermediate = fold && no_sync_depth > 0;
}

void DistributedDataParallel::Impl::on_grad_ready(size_t i, Tensor& grad) {
  if (no_sync_depth > 0 && !fold) return;
  readiness->enter();
  rebind_into_bucket(params[i], grad, views[i]);
  readiness->ready(i);
}

void DistributedDataParallel::Impl::launch(size_t b) {
  const FlatBucket& bucket = layout.buckets[b];
  Tensor& buf = flat[b];
  if (b == 0 && injected_fault() == Fault::kReduceTwice)  // tests: a bucket reduced twice
    comm->all_reduce(buf.data_ptr(), buf.data_ptr(), static_cast<size_t>(bucket.numel),
                     bucket.dtype, ReduceOp::kSum);
  if (intermediate)
    work[b] = comm->reduce_async(buf.data_ptr(), buf.data_ptr(), static_cast<size_t>(bucket.numel),
                                 bucket.dtype, ReduceOp::kSum, 0);
  else
    work[b] =
        comm->all_reduce_async(buf.data_ptr(), buf.data_ptr(), static_cast<size_t>(bucket.numel),
                               bucket.dtype, options.average ? ReduceOp::kAvg : ReduceOp::kSum);
  in_flight[b] = 1;
  ++stats.reductions;
}

void DistributedDataParallel::Impl::finish() {
  if (!attached || intermediate) wait_all();
  if (intermediate && group->rank() != 0)
    for (Tensor& buf : flat) buf.zero_();  // rank 0 keeps the sum; the next c_r starts at zero
}

void DistributedDataParallel::Impl::wait_bucket(size_t b) {
  if (!in_flight[b]) return;
  const auto t0 = std::chrono::steady_clock::now();
  in_flight[b] = 0;
  comm->complete(work[b]);
  stats.exposed_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void DistributedDataParallel::Impl::wait_all() {
  for (size_t b = 0; b < in_flight.size(); ++b) wait_bucket(b);
}

DistributedDataParallel::DistributedDataParallel(tensor::nn::Module& module, Communicator& group,
                                                 DataParallelOptions options)
    : impl_(std::make_unique<Impl>()) {
  CHORUS_ARG_CHECK(options.bucket_bytes > 0 && options.first_bucket_bytes > 0,
                   "DistributedDataParallel: bucket sizes must be positive");
  Impl& d = *impl_;
  d.module = &module;
  d.group = &group;
  d.options = options;
  d.fold = group.deterministic();
  tensor::nn::NamedTensors all;
  for (auto& [name, p] : module.named_parameters())
    if (!options.include || options.include(name)) all.emplace_back(name, p);
  check_same_parameters(group, all, "DistributedDataParallel");
  const tensor::Device device = common_device(all, "DistributedDataParallel");
  d.comm.emplace(group, device, CommOrder::kOverlap);
  if (options.broadcast_parameters) broadcast_parameters(group, all);
  agree_on_kernels(group);

  for (const auto& [name, p] : all)
    if (p.requires_grad()) {
      d.names.push_back(name);
      d.params.push_back(p);
    }
  // Reverse registration order: roughly the order backward finishes gradients.
  std::vector<ParamShape> shapes;
  std::vector<size_t> order;
  for (size_t i = d.params.size(); i-- > 0;) order.push_back(i);
  for (const Tensor& p : d.params) shapes.push_back({p.dtype(), p.numel()});
  d.layout = plan_buckets(shapes, order, options.first_bucket_bytes, options.bucket_bytes, 1);

  tensor::NoGradGuard no_grad;
  d.views.resize(d.params.size());
  for (const FlatBucket& bucket : d.layout.buckets) {
    Tensor buf = Tensor::zeros({bucket.numel}, bucket.dtype, device);
    for (const FlatSlot& s : bucket.slots) {
      Tensor& p = d.params[s.param];
      Tensor view = buf.narrow(0, s.offset, s.numel).view(p.shape());
      if (p.grad().defined()) view.copy_(p.grad());  // keep what was accumulated before wrapping
      p.bind_grad(view);
      d.views[s.param] = view;
    }
    d.flat.push_back(std::move(buf));
  }
  d.work.resize(d.layout.buckets.size());
  d.in_flight.assign(d.layout.buckets.size(), 0);

  Impl* self = &d;
  std::vector<size_t> bucket_of;
  for (size_t i = 0; i < d.params.size(); ++i) bucket_of.push_back(d.layout.where[i].first);
  d.readiness.emplace("DistributedDataParallel", d.names, std::move(bucket_of),
                      d.layout.buckets.size(),
                      "it is reduced as it is (zeros after zero_grad()), and every rank still "
                      "takes part",
                      BucketReadiness::Owner{.open = [self] { self->open_step(); },
                                             .unused = nullptr,
                                             .final = nullptr,
                                             .launch = [self](size_t b) { self->launch(b); },
                                             .finished = [self] { self->finish(); }},
                      options.may_be_unused);
  for (size_t i = 0; i < d.params.size(); ++i)
    d.hooks.push_back(
        d.params[i].register_grad_ready_hook([self, i](Tensor& g) { self->on_grad_ready(i, g); }));
  d.forward_hook =
      module.add_forward_pre_hook([self](const tensor::nn::Module&) { self->wait_all(); });
  CHORUS_INFO(kLogPar, "DistributedDataParallel: ", d.params.size(), " parameters in ",
              d.layout.buckets.size(), " buckets over ", group.size(), " ranks");
}

DistributedDataParallel::~DistributedDataParallel() {
  Impl& d = *impl_;
  for (size_t i = 0; i < d.params.size(); ++i) d.params[i].remove_grad_ready_hook(d.hooks[i]);
  d.module->remove_hook(d.forward_hook);
  for (size_t b = 0; b < d.in_flight.size(); ++b) {
    if (!d.in_flight[b]) continue;
    d.in_flight[b] = 0;
    try {
      d.work[b].wait();
    } catch (const std::exception& e) {  // never throw from a destructor
      CHORUS_WARN(kLogPar,
                  "DistributedDataParallel: a reduction failed during teardown: ", e.what());
    }
  }
}

tensor::nn::Module& DistributedDataParallel::module() { return *impl_->module; }
Communicator& DistributedDataParallel::group() { return *impl_->group; }

void DistributedDataParallel::attach(tensor::optim::Optimizer& optimizer) {
  Impl& d = *impl_;
  // Map the optimizer's parameters to buckets; visit them in bucket order.
  const auto& ops = optimizer.params();
  std::vector<size_t> bucket_of(ops.size(), SIZE_MAX);
  for (size_t k = 0; k < ops.size(); ++k) {
    for (size_t i = 0; i < d.params.size(); ++i)
      if (ops[k].second.impl() == d.params[i].impl()) bucket_of[k] = d.layout.where[i].first;
    CHORUS_ARG_CHECK(bucket_of[k] != SIZE_MAX,
                     "DistributedDataParallel::attach: the optimizer's "
                     "parameter '",
                     ops[k].first, "' is not a parameter of the wrapped module");
  }
  std::vector<size_t> order(ops.size());
  for (size_t k = 0; k < ops.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return bucket_of[a] < bucket_of[b]; });
  Impl* self = &d;
  optimizer.set_grad_gate(
      {std::move(order), [self, bucket_of](size_t k) { self->wait_bucket(bucket_of[k]); }});
  d.attached = true;
}

void DistributedDataParallel::wait() { impl_->wait_all(); }

DistributedDataParallel::NoSync DistributedDataParallel::no_sync() {
  return NoSync(&impl_->no_sync_depth);
}

std::vector<DistributedDataParallel::BucketInfo> DistributedDataParallel::buckets() const {
  std::vector<BucketInfo> out;
  for (const FlatBucket& b : impl_->layout.buckets) {
    BucketInfo info;
    info.dtype = b.dtype;
    info.numel = b.numel;
    info.bytes = static_cast<size_t>(b.numel) * dtype_size(b.dtype);
    for (const FlatSlot& s : b.slots) info.params.push_back(impl_->names[s.param]);
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<std::string> DistributedDataParallel::unused_parameters() const {
  const std::set<std::string>& unused = impl_->readiness->unused();
  return {unused.begin(), unused.end()};
}

DistributedDataParallel::Stats DistributedDataParallel::stats() const { return impl_->stats; }

}  // namespace chorus::parallel
