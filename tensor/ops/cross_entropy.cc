// cross_entropy: logits (N, V), targets (N) i32/i64 -> () mean over N of -log p[target].
// cross_entropy_vocab_parallel: the same over a vocabulary shard, with the caller's reductions.
//
// Per row n:  max_n = max_v logit;  S_n = sum_v exp(logit - max_n)
//             loss_n = log S_n + max_n - logit[target_n]
// backward:   dlogit[v] += (exp(logit[v] - max_n) / S_n - [v == target_n]) * dloss / N
// With the vocabulary split, max_n is all-reduced (max) before S_n, then (S_n, logit[target])
// are all-reduced (sum; a rank holds the target logit only if its shard owns it, else adds 0).
// Saved: logits, the row maxima and the sums, so backward needs no communication.
#include "ops/op_util.h"

namespace chorus::tensor {

Tensor cross_entropy_vocab_parallel(const Tensor& logits_in, const Tensor& targets_in,
                                    int64_t vocab_start, const VocabReductions& reductions) {
  check_defined(logits_in, "cross_entropy", "logits");
  check_defined(targets_in, "cross_entropy", "targets");
  CHORUS_ARG_CHECK(logits_in.dim() == 2, "cross_entropy: logits must be (N, V), got ",
                   to_string(logits_in.shape()));
  const int64_t N = logits_in.size(0);
  CHORUS_ARG_CHECK(targets_in.numel() == N, "cross_entropy: ", targets_in.numel(), " targets for ",
                   N, " rows");
  check_float(logits_in, "cross_entropy");
  CHORUS_ARG_CHECK(targets_in.dtype() == DataType::kI32 || targets_in.dtype() == DataType::kI64,
                   "cross_entropy: index dtype ", to_string(targets_in.dtype()),
                   " not supported (i32 or i64)");
  Backend& be = backend_of("cross_entropy", {{logits_in, "logits"}, {targets_in, "targets"}});
  const Tensor logits = dense(logits_in), targets = dense(targets_in);
  const DataType dt = logits.dtype();
  const Device dev = logits.device();
  Tensor rmax = Tensor::empty({N}, dt, dev), sums = Tensor::empty({N, 2}, dt, dev);
  Tensor loss = Tensor::empty({}, dt, dev);
  be.row_max(rmax, logits);
  if (reductions.max_all_reduce) reductions.max_all_reduce(rmax);
  be.exp_sums_and_target(sums, logits, rmax, targets, vocab_start);
  if (reductions.sum_all_reduce) reductions.sum_all_reduce(sums);
  be.cross_entropy_loss(loss, sums, rmax);
  return record("cross_entropy", loss, {logits_in},
                [logits, targets, rmax, sums, vocab_start](const Tensor& dy, GradSink& g) {
                  Tensor dx = g.grad(0);
                  if (!dx.defined()) return;
                  backend_for(dx.device())
                      .cross_entropy_backward(dx, logits, rmax, sums, targets, vocab_start, dy);
                });
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets) {
  if (logits.defined() && logits.dim() == 2 && targets.defined()) {
    // Validate targets here: the sharded form tolerates out-of-shard targets by design.
    const int64_t V = logits.size(1);
    for (double t : targets.to_vector())
      CHORUS_ARG_CHECK(t >= 0 && t < static_cast<double>(V), "cross_entropy: target ", t,
                       " outside [0, ", V, ")");
  }
  return cross_entropy_vocab_parallel(logits, targets, 0, VocabReductions{});
}

}  // namespace chorus::tensor
