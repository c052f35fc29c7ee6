// Internal: softmax over the last dim and the softmax cross-entropy pieces. T = float or double.
//   x, y, dx, dy (N, V). Backward kernels accumulate (+=).
#pragma once

#include <cstdint>

namespace chorus::tensor::cpu {

template <class T>
void softmax_forward(T* y, const T* x, int64_t N, int64_t V);
// dx += y * (dy - sum(dy * y))
template <class T>
void softmax_backward(T* dx, const T* y, const T* dy, int64_t N, int64_t V);

// Row maxima of logits (N, V): row_max (N).
template <class T>
void row_max(T* row_max, const T* logits, int64_t N, int64_t V);
// Given the (global) row maxima, per row: sums[2n] = sum_v exp(logit - max),
// sums[2n+1] = logit at target[n] - vocab_start when it falls in [0, V), else 0.
template <class T, class I>
void exp_sums_and_target(T* sums, const T* logits, const T* row_max, const I* targets,
                         int64_t vocab_start, int64_t N, int64_t V);
// dlogits (N, V) += (exp(logit - max) / sumexp - [v == target - vocab_start]) * scale
template <class T, class I>
void cross_entropy_backward(T* dlogits, const T* logits, const T* row_max, const T* sums,
                            const I* targets, int64_t vocab_start, int64_t N, int64_t V, T scale);

}  // namespace chorus::tensor::cpu
