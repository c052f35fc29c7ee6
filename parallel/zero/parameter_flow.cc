// ZeRO-3's parameters: each unit's values live as one shard per rank, and the whole unit only
// while it computes.
//
// A unit's parameters are views into its flat buffer, whose storage is released between uses
// (tensor::Storage::release: every view, the ones autograd saved for backward included, sees the
// bytes again once they are gathered). Life of unit u in one step:
//   forward   its pre-forward hook gathers it (waiting for the prefetch when one was started)
//             and starts the gather of the next unit in forward order; its forward hook wraps
//             the output in an identity op whose backward calls prepare_backward(u), then
//             releases the unit.
//   backward  prepare_backward(u) (from that identity op, or from the pre-forward hook when a
//             checkpointed block is recomputed) gathers the unit again, starts the gather of the
//             previous unit, and binds the unit's gradients into a fresh zeroed flat buffer; when
//             the unit's last gradient is final (gradient_flow.cc) it is released and its
//             gradients reduce-scattered.
// The root unit (parameters outside every unit: embeddings, final LayerNorm) is gathered by the
// model's pre-forward hook and stays until its gradients are final at the end of backward: the
// tied lm_head uses wte at both ends of the step. The model's forward hook marks the end of the
// forward phase: pre-forward hooks after it are recomputations.
//
// Every rank runs the same hooks in the same order (the engine's order is deterministic), so
// the gathers and reduce-scatters pair up across ranks.
#include "chorus/error.h"
#include "chorus/tensor/autograd.h"
#include "common/pre_backward.h"
#include "zero/zero_state.h"

namespace chorus::parallel {
size_t ZeroOptimizer::Impl::unit_of(const tensor::nn::Module& m) const {
  for (size_t g = 0; g < groups.size(); ++g)
    if (groups[g].module == &m) return g;
  return SIZE_MAX;
}

void ZeroOptimizer::Impl::prefetch(size_t gi) {
  ZeroGroup& g = groups[gi];
  if (g.params != ZeroGroup::Params::kReleased) return;
  g.flat_param.storage()->reallocate();
  g.gather = beside->all_gather_async(g.shard_param.data_ptr(), g.flat_param.data_ptr(),
                                      static_cast<size_t>(g.hi - g.lo), g.dtype);
  g.params = ZeroGroup::Params::kGathering;
}

void ZeroOptimizer::Impl::ensure_gathered(size_t gi) {
  ZeroGroup& g = groups[gi];
  if (g.params == ZeroGroup::Params::kReleased) prefetch(gi);
  if (g.params == ZeroGroup::Params::kGathering) {
    g.params = ZeroGroup::Params::kGathered;  // before wait: a failed gather is not retried
    g.gather.wait();
  }
}

void ZeroOptimizer::Impl::release(size_t gi) {
  ZeroGroup& g = groups[gi];
  if (g.params == ZeroGroup::Params::kReleased) return;
  if (g.params == ZeroGroup::Params::kGathering) g.gather.wait();  // it writes the buffer
  g.flat_param.storage()->release();
  g.params = ZeroGroup::Params::kReleased;
}

void ZeroOptimizer::Impl::prepare_backward(size_t gi) {
  ensure_gathered(gi);
  if (options.prefetch) {
    // The unit before this one in forward order runs its backward next.
    for (size_t k = 1; k < forward_units.size(); ++k)
      if (forward_units[k] == gi) prefetch(forward_units[k - 1]);
  }
  bind_unit_grads(gi);
}

void ZeroOptimizer::Impl::bind_unit_grads(size_t gi) {
  ZeroGroup& g = groups[gi];
  if (g.grads_bound) return;
  wait_reduce(gi);  // an earlier backward's reduce-scatter still reads the old buffer
  g.flat_grad = Tensor::zeros({g.numel}, g.dtype, device);
  for (const FlatSlot& s : g.slots) {
    Tensor& p = params[s.param];
    p.bind_grad(g.flat_grad.narrow(0, s.offset, s.numel).view(p.shape()));
  }
  g.grads_bound = true;
}

void ZeroOptimizer::Impl::install_unit_hooks() {
  // The model: the root unit is gathered for the whole step; the end of its forward starts the
  // backward phase.
  module_hooks.emplace_back(model, model->add_forward_pre_hook([this](const tensor::nn::Module&) {
    in_backward_phase = false;
    ensure_gathered(root_unit);
    if (options.prefetch && !forward_units.empty()) prefetch(forward_units.front());
  }));
  module_hooks.emplace_back(model,
                            model->add_forward_hook([this](const tensor::nn::Module&, Tensor&) {
                              in_backward_phase = true;
                              if (tensor::grad_enabled()) prepare_backward(root_unit);
                            }));
  for (size_t k = 0; k < forward_units.size(); ++k) {
    const size_t gi = forward_units[k];
    tensor::nn::Module* m = groups[gi].module;
    const size_t next = k + 1 < forward_units.size() ? forward_units[k + 1] : SIZE_MAX;
    module_hooks.emplace_back(
        m, m->add_forward_pre_hook([this, gi, next](const tensor::nn::Module&) {
          if (in_backward_phase) {  // a checkpointed unit recomputed inside backward
            prepare_backward(gi);
            return;
          }
          ensure_gathered(gi);
          if (options.prefetch && next != SIZE_MAX) prefetch(next);
        }));
    module_hooks.emplace_back(
        m, m->add_forward_hook([this, gi](const tensor::nn::Module&, Tensor& out) {
          if (in_backward_phase) return;
          if (tensor::grad_enabled() && out.requires_grad())
            out = with_pre_backward(
                out, [this, gi] { prepare_backward(gi); }, "zero3_pre_backward");
          release(gi);
        }));
  }
}

}  // namespace chorus::parallel
