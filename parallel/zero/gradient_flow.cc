// ZeRO's gradients: from the grad-ready hooks to this rank's reduced shard.
//
// As in DDP, the first hook of a backward opens the step (resets each group's count of
// gradients to come, queues the finish on the engine) and a group whose count reaches zero is
// reduce-scattered, strictly in group order, so every rank issues the same collectives in the
// same order. What the hook does with the gradient depends on the stage:
//   1  the gradient already lives in the group's flat buffer (bound): nothing to move; the
//      reduce-scatter runs in place, leaving the reduced shard at [lo, hi) of that buffer.
//   2  the gradient is copied into the group's staging buffer (allocated at its first gradient)
//      and dropped; the reduce-scatter writes the shard.
//   3  the gradient lives in the unit's flat buffer, bound before the unit's backward
//      (parameter_flow.cc); once the unit's last gradient is final its parameters are released.
// Stages 2-3 add the reduced shard of every backward to shard_grad (the first since zero_grad()
// is written there directly), and free the full buffer as soon as its reduce-scatter is done.
//
// Folding (a deterministic dp group): the sum over micro-batches is the fold one process makes,
// ((T + c_0) + c_1) + ... + c_{N-1} per micro-step, T the running sum and c_r rank r's
// contribution. Stage 1 keeps T on rank 0 as DDP does (data_parallel.cc): a backward under
// no_sync() reduces onto rank 0 and ranks >= 1 zero their buckets; the last one reduce-scatters
// the same fold. Stages 2-3 keep T where it is sharded: each backward's buffer goes out by an
// all-to-all (the reduce-scatter's traffic), and the owner adds the N copies of its shard to
// shard_grad in rank order (tensor::accumulate_grad, as the engine adds). The sum is divided by
// N (averaging) once, when step() or clip_grad_norm() first reads it.
//
// Hybrid sharding (shard groups of G ranks, R replicas of the shards; zero.h): without folding,
// the reduce-scatter runs inside the shard group and, once it is done, the reduced shard is
// all-reduced over its replica group (wait_reduce). That second step is blocking and issued only
// where every rank's program reaches the same point (never from poll_reduces, which depends on
// timing), so the replica groups' collectives come in the same order on every rank. Folding
// must add the D = G R contributions in dp rank order, which no sum inside the group first
// preserves: stage 1 reduces over the whole dp group (onto rank 0 under no_sync(), an
// all-reduce on the last backward); stages 2-3 send shard i of every rank's buffer to each rank
// holding shard i by one all-to-all over dp, and each folds its D copies in dp rank order.
//
// Reduced already (ZeroOptions::gradients_reduced: every rank holds the same sum, a mixture of
// experts' experts folded in the global batch's order by fold_expert_gradients): no hook is
// installed and nothing is communicated; stage 1's pieces read the flat buffers the gradients
// are bound into (where the fold adds), stage 2 copies its shard out of the full gradients once
// per step (take_reduced_shards) and drops them.
#include <algorithm>

#include "chorus/error.h"
#include "chorus/kernels/cpu.h"
#include "chorus/kernels/gpu.h"
#include "chorus/log.h"
#include "chorus/tensor/autograd.h"
#include "chorus/tensor/device.h"
#include "common/fault_injection.h"
#include "common/flat_layout.h"
#include "zero/zero_state.h"

namespace chorus::parallel {

void ZeroOptimizer::Impl::install_gradient_hooks() {
  if (options.gradients_reduced) return;  // nothing to reduce: finish_gradients reads them
  for (size_t i = 0; i < params.size(); ++i)
    grad_hooks.push_back(
        params[i].register_grad_ready_hook([this, i](Tensor& g) { on_grad_ready(i, g); }));
}

void ZeroOptimizer::Impl::open_step() {
  wait_all_reduces();
  intermediate = fold && options.stage == 1 && no_sync_depth > 0;
}

void ZeroOptimizer::Impl::on_grad_ready(size_t i, Tensor& grad) {
  if (options.stage == 1 && no_sync_depth > 0 && !fold) return;
  readiness->enter();
  const auto [gi, si] = where[i];
  ZeroGroup& g = groups[gi];
  const FlatSlot& slot = g.slots[si];
  if (options.stage == 2) {
    if (!g.flat_grad.defined()) g.flat_grad = Tensor::zeros({g.numel}, g.dtype, device);
    if (grad.defined()) g.flat_grad.narrow(0, slot.offset, slot.numel).copy_(grad.reshape({-1}));
    params[i].set_grad({});  // the full gradient goes: only the shard stays
  } else {
    if (options.stage == 3) bind_unit_grads(gi);  // normally done before the unit's backward
    rebind_into_bucket(params[i], grad,
                       g.flat_grad.narrow(0, slot.offset, slot.numel).view(params[i].shape()));
  }
  readiness->ready(i);
}

void ZeroOptimizer::Impl::group_final(size_t gi) {
  if (options.stage == 3) release(gi);  // every use of the unit's parameters is behind us
}

void ZeroOptimizer::Impl::launch(size_t gi) {
  ZeroGroup& g = groups[gi];
  const size_t shard = static_cast<size_t>(g.hi - g.lo);
  const size_t es = dtype_size(g.dtype);
  auto* flat = static_cast<std::byte*>(g.flat_grad.data_ptr());
  const ReduceOp op = options.average ? ReduceOp::kAvg : ReduceOp::kSum;
  // Folding over the whole dp group (the shard group but with hybrid sharding).
  TensorComm& whole = replicas > 1 ? *dp_beside : *beside;
  if (options.stage == 1 && intermediate) {
    // Folding under no_sync(): onto dp rank 0's running sum.
    g.reduce =
        whole.reduce_async(flat, flat, static_cast<size_t>(g.numel), g.dtype, ReduceOp::kSum, 0);
  } else if (options.stage == 1 && fold && replicas > 1) {
    // The fold of every dp rank, everywhere; this rank reads its shard of it.
    g.reduce = whole.all_reduce_async(flat, flat, static_cast<size_t>(g.numel), g.dtype, op);
  } else if (options.stage == 1) {
    // In place: this rank's reduced shard lands at [lo, hi) of the gradient buffer.
    g.reduce = beside->reduce_scatter_async(flat, flat + static_cast<size_t>(g.lo) * es, shard,
                                            g.dtype, op);
    g.across = replicas > 1;
  } else {
    // Free the buffers of reduce-scatters that are done, and keep at most kInFlight full
    // buffers alive: beyond that, the oldest is waited for (bounded memory for less overlap).
    poll_reduces();
    constexpr int kInFlight = 2;
    int in_flight = 0;
    for (const ZeroGroup& other : groups) in_flight += other.reducing ? 1 : 0;
    for (size_t o = 0; o < groups.size() && in_flight >= kInFlight; ++o)
      if (groups[o].reducing) {
        wait_reduce(o);
        --in_flight;
      }
    if (fold && replicas > 1) {
      // Every dp rank's copy of this rank's shard comes in, in dp rank order: dp rank d
      // (index d mod G in its group) is sent shard d mod G of this buffer.
      const int64_t n = g.hi - g.lo;
      const bool wrong = injected_fault() == Fault::kWrongGroup;  // tests only
      g.outbox = Tensor::empty({n * dp_ranks}, g.dtype, device);
      for (int d = 0; d < dp_ranks; ++d) {
        const int index = (d % ranks + (wrong ? d / ranks : 0)) % ranks;
        g.outbox.narrow(0, d * n, n).copy_(g.flat_grad.narrow(0, index * n, n));
      }
      g.inbox = Tensor::empty({n * dp_ranks}, g.dtype, device);
      g.reduce =
          dp_beside->all_to_all_async(g.outbox.data_ptr(), g.inbox.data_ptr(), shard, g.dtype);
    } else if (fold) {
      // Every rank's copy of this rank's shard comes in; wait_reduce adds them in rank order.
      g.inbox = Tensor::empty({g.numel}, g.dtype, device);
      g.reduce = beside->all_to_all_async(flat, g.inbox.data_ptr(), shard, g.dtype);
    } else {
      Tensor target = g.shard_grad;
      if (!g.shard_grad_fresh)
        target = g.reduce_into = Tensor::empty({g.hi - g.lo}, g.dtype, device);
      g.shard_grad_fresh = false;
      g.reduce = beside->reduce_scatter_async(flat, target.data_ptr(), shard, g.dtype, op);
      g.across = replicas > 1;
    }
    // The buffer now belongs to the reduce-scatter: a later backward binds a fresh one
    // (prepare_backward), and this one goes once the reduce-scatter is done (wait_reduce).
    g.grads_bound = false;
  }
  g.reducing = true;
}

void ZeroOptimizer::Impl::unused_parameter(size_t i) {
  // Reduced as zeros: its group needs a buffer.
  const size_t gi = where[i].first;
  if (options.stage == 3) bind_unit_grads(gi);
  ZeroGroup& g = groups[gi];
  if (!g.flat_grad.defined()) g.flat_grad = Tensor::zeros({g.numel}, g.dtype, device);
}

void ZeroOptimizer::Impl::finish_backward() {
  if (intermediate) {
    // Rank 0 keeps the running sum; the next contribution of the others starts at zero.
    wait_all_reduces();
    if (dp->rank() != 0)
      for (ZeroGroup& g : groups) g.flat_grad.zero_();
  }
}

void ZeroOptimizer::Impl::wait_reduce(size_t gi) {
  ZeroGroup& g = groups[gi];
  if (!g.reducing) return;
  g.reducing = false;
  g.reduce.wait();
  if (g.across) {
    // Hybrid: the shard group's reduced shard, over the ranks holding the same shard.
    g.across = false;
    Tensor reduced = options.stage == 1        ? g.flat_grad.narrow(0, g.lo, g.hi - g.lo)
                     : g.reduce_into.defined() ? g.reduce_into
                                               : g.shard_grad;
    across->all_reduce(reduced.data_ptr(), reduced.data_ptr(), static_cast<size_t>(g.hi - g.lo),
                       g.dtype, options.average ? ReduceOp::kAvg : ReduceOp::kSum);
  }
  if (g.inbox.defined()) {
    const int64_t shard = g.hi - g.lo;
    for (int64_t r = 0; r < g.inbox.numel() / std::max<int64_t>(shard, 1); ++r)
      tensor::accumulate_grad(g.shard_grad, g.inbox.narrow(0, r * shard, shard));
    g.inbox = Tensor();
    g.outbox = Tensor();
  }
  if (g.reduce_into.defined()) {
    if (device.is_cpu())
      kernels::reduce(g.dtype, ReduceOp::kSum, g.shard_grad.data_ptr(), g.shard_grad.data_ptr(),
                      g.reduce_into.data_ptr(), static_cast<size_t>(g.hi - g.lo));
    else
      tensor::accumulate_grad(g.shard_grad, g.reduce_into);  // the same a + b, on the device
    g.reduce_into = Tensor();
  }
  if (options.stage >= 2 && !g.grads_bound) {
    // The full buffer is no longer needed: its memory goes now (parameters whose gradients are
    // still views into it let go of them).
    for (const FlatSlot& s : g.slots) {
      Tensor& p = params[s.param];
      if (p.grad_bound() && p.grad().storage() == g.flat_grad.storage()) p.set_grad({});
    }
    g.flat_grad = Tensor();
  }
}

void ZeroOptimizer::Impl::wait_all_reduces() {
  for (size_t g = 0; g < groups.size(); ++g) wait_reduce(g);
}

void ZeroOptimizer::Impl::finish_gradients() {
  wait_all_reduces();
  if (options.gradients_reduced) return take_reduced_shards();
  if (!fold || options.stage == 1 || !options.average || averaged) return;
  averaged = true;
  for (ZeroGroup& g : groups) {
    if (device.is_cpu())
      kernels::divide(g.dtype, g.shard_grad.data_ptr(), g.shard_grad.data_ptr(),
                      static_cast<size_t>(g.hi - g.lo), dp_ranks);
    else  // the same division on the device, in the engine's order
      kernels::gpu::divide(g.dtype, g.shard_grad.data_ptr(), g.shard_grad.data_ptr(),
                           static_cast<size_t>(g.hi - g.lo), dp_ranks,
                           tensor::compute_stream(device));
  }
}

void ZeroOptimizer::Impl::take_reduced_shards() {
  // Stage 1 reads the flat buffers the gradients are bound into.
  if (options.stage == 1 || taken) return;
  taken = true;
  for (ZeroGroup& g : groups)
    for (const FlatSlot& s : g.slots) {
      Tensor& p = params[s.param];
      const int64_t a = std::max(g.lo, s.offset), b = std::min(g.hi, s.offset + s.numel);
      if (a < b) {
        Tensor piece = g.shard_grad.narrow(0, a - g.lo, b - a);
        if (p.grad().defined())
          piece.copy_(p.grad().reshape({-1}).narrow(0, a - s.offset, b - a));
        else  // no gradient anywhere (an expert no token reached): zeros
          piece.zero_();
      }
      p.set_grad({});  // only the shard stays
    }
}

void ZeroOptimizer::Impl::poll_reduces() {
  // A replica group's all-reduce must not start where a clock decided (see above).
  if (replicas > 1 && !fold) return;
  for (size_t g = 0; g < groups.size(); ++g)
    if (groups[g].reducing && groups[g].reduce.test()) wait_reduce(g);
}

}  // namespace chorus::parallel
