// cross_entropy: logits (N, V), targets (N) i32/i64 -> () mean over N of -log p[target].
// cross_entropy_vocab_parallel: the same over a vocabulary shard, with the caller's reductions.
//
// Per row n:  max_n = max_v logit;  S_n = sum_v exp(logit - max_n)
//             loss_n = log S_n + max_n - logit[target_n]
// backward:   dlogit[v] += (exp(logit[v] - max_n) / S_n - [v == target_n]) * dloss / N
// With the vocabulary split, max_n is all-reduced (max) before S_n, then (S_n, logit[target])
// are all-reduced (sum; a rank holds the target logit only if its shard owns it, else adds 0).
// Saved: logits, the row maxima and the sums, so backward needs no communication.
#include <cmath>

#include "cpu/softmax.h"
#include "ops/op_util.h"

namespace chorus::tensor {

Tensor cross_entropy_vocab_parallel(const Tensor& logits_in, const Tensor& targets_in,
                                    int64_t vocab_start, const VocabReductions& reductions) {
  check_defined(logits_in, "cross_entropy", "logits");
  check_defined(targets_in, "cross_entropy", "targets");
  CHORUS_ARG_CHECK(logits_in.dim() == 2, "cross_entropy: logits must be (N, V), got ",
                   to_string(logits_in.shape()));
  const int64_t N = logits_in.size(0), V = logits_in.size(1);
  CHORUS_ARG_CHECK(targets_in.numel() == N, "cross_entropy: ", targets_in.numel(), " targets for ",
                   N, " rows");
  const Tensor logits = dense(logits_in), targets = dense(targets_in);
  const DataType dt = logits.dtype();
  Tensor rmax = Tensor::empty({N}, dt), sums = Tensor::empty({N, 2}, dt);
  Tensor loss = Tensor::empty({}, dt);
  dispatch_float(dt, "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    cpu::row_max(rmax.data<T>(), logits.data<T>(), N, V);
    if (reductions.max_all_reduce) reductions.max_all_reduce(rmax);
    dispatch_index(targets.dtype(), "cross_entropy", [&](auto itag) {
      using I = decltype(itag);
      cpu::exp_sums_and_target(sums.data<T>(), logits.data<T>(), rmax.data<T>(), targets.data<I>(),
                               vocab_start, N, V);
    });
    if (reductions.sum_all_reduce) reductions.sum_all_reduce(sums);
    const T* s = sums.data<T>();
    const T* m = rmax.data<T>();
    double total = 0;
    for (int64_t n = 0; n < N; ++n)
      total += std::log(double(s[2 * n])) + double(m[n]) - double(s[2 * n + 1]);
    *loss.data<T>() = static_cast<T>(total / static_cast<double>(N));
  });
  return record("cross_entropy", loss, {logits_in},
                [logits, targets, rmax, sums, vocab_start, N, V](const Tensor& dy, GradSink& g) {
                  Tensor dx = g.grad(0);
                  if (!dx.defined()) return;
                  dispatch_float(dx.dtype(), "cross_entropy backward", [&](auto tag) {
                    using T = decltype(tag);
                    const T scale = static_cast<T>(double(*dy.data<T>()) / static_cast<double>(N));
                    dispatch_index(targets.dtype(), "cross_entropy backward", [&](auto itag) {
                      using I = decltype(itag);
                      cpu::cross_entropy_backward(dx.data<T>(), logits.data<T>(), rmax.data<T>(),
                                                  sums.data<T>(), targets.data<I>(), vocab_start, N,
                                                  V, scale);
                    });
                  });
                });
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets) {
  if (logits.defined() && logits.dim() == 2) {
    // Validate targets here: the sharded form tolerates out-of-shard targets by design.
    const int64_t V = logits.size(1);
    for (double t : targets.to_vector())
      CHORUS_ARG_CHECK(t >= 0 && t < static_cast<double>(V), "cross_entropy: target ", t,
                       " outside [0, ", V, ")");
  }
  return cross_entropy_vocab_parallel(logits, targets, 0, VocabReductions{});
}

}  // namespace chorus::tensor
