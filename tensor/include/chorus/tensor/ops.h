// chorus::tensor — the differentiable ops (a GPT's worth). Each is implemented in
// tensor/ops/<op>.cc with its forward and backward side by side.
//
// Shape legend: B batch, T time (sequence), C channels (width), NH heads, HS head size (C/NH),
// V vocabulary, N rows (any leading dims flattened), K/M inner and output dims of a matmul.
// Float ops accept f32 and f64 (both operands the same dtype); index inputs accept i32 or i64.
#pragma once

#include <cstdint>
#include <functional>

#include "chorus/tensor/random.h"
#include "chorus/tensor/tensor.h"

namespace chorus::tensor {

// ---- element-wise ---------------------------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);  // same shape
Tensor sub(const Tensor& a, const Tensor& b);  // same shape
Tensor mul(const Tensor& a, const Tensor& b);  // same shape
Tensor scale(const Tensor& a, double factor);  // a * factor
// x (..., C) + bias (C) on every row (the bias of a layer whose product is computed apart).
Tensor add_bias(const Tensor& x, const Tensor& bias);
Tensor gelu(const Tensor& x);  // tanh approximation (GPT-2)
// Zeroes each element with probability p (mask from key at the element's row-major index) and
// scales the rest by 1/(1-p). p == 0 returns x unchanged.
Tensor dropout(const Tensor& x, double p, RngKey key);

// ---- reductions ----------------------------------------------------------------------------
Tensor sum(const Tensor& x);   // () scalar
Tensor mean(const Tensor& x);  // () scalar

// ---- matmul family ---------------------------------------------------------------------------
// a (..., M, K) @ b (K, N) -> (..., M, N); or batched: a (Bt, M, K) @ b (Bt, K, N).
Tensor matmul(const Tensor& a, const Tensor& b);
// x (..., K) @ weight (M, K)^T + bias (M) -> (..., M). bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// ---- GPT layers --------------------------------------------------------------------------------
// weight (V, C) rows gathered by idx (B, T) of i32/i64 -> (B, T, C).
Tensor embedding(const Tensor& idx, const Tensor& weight);
// x (..., C) normalised over C, times weight (C) plus bias (C); eps 1e-5.
Tensor layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// Softmax over the last dim of x (..., V).
Tensor softmax(const Tensor& x);
// Causal scaled-dot-product attention, heads as a dimension (split them across ranks by
// narrowing dim 1): q, k, v (B, NH, T, HS), any strides -> (B, NH, T, HS) contiguous.
// out[b,h,t] = sum_{s<=t} softmax_s(q[b,h,t].k[b,h,s] / sqrt(HS)) v[b,h,s].
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v);
// The same on GPT-2's fused projection: qkv (B, T, 3 * NH * HS), laid out (B, T, 3, NH, HS)
// [q | k | v, heads side by side] -> (B, T, NH * HS), heads side by side. Equal to
// causal_attention on the q/k/v views, transposed back to (B, T, C), without the copies.
Tensor causal_attention_qkv(const Tensor& qkv, int64_t heads);
// Where a device has fused (flash) attention kernels (the CUDA backend, f32 and f64, head size
// up to 128), both forms use them: they keep the output and a logsumexp per row for backward
// instead of the (B, NH, T, T) weights. On by default; CHORUS_TENSOR_FUSED_ATTENTION=0 or
// set_fused_attention(false) keeps the weights (the batched-GEMM path, as on the CPU).
bool fused_attention();
void set_fused_attention(bool on);

// ---- routing (a mixture of experts, nn/moe.cc) ----------------------------------------------
// x (N, C), idx (M) i32/i64 -> (M, C): out[m] = x[idx[m]]. Backward adds dy[m] to row idx[m],
// m in order.
Tensor gather_rows(const Tensor& x, const Tensor& idx);
// base (N, C), idx (M) i32/i64, src (M, C) -> (N, C): base with src[m] added to row idx[m], m in
// order (a fixed order: the same bits at any thread count). InvalidArgument for an index outside
// [0, N) (checked on the host).
Tensor index_add_rows(const Tensor& base, const Tensor& idx, const Tensor& src);
// x (M, C), s (M) -> (M, C): row m of x times s[m].
Tensor scale_rows(const Tensor& x, const Tensor& s);
// x (..., V) -> (...): log sum_v exp(x[..., v]), computed in double.
Tensor logsumexp(const Tensor& x);

// ---- loss
// ------------------------------------------------------------------------------------------ Mean
// over N of -log softmax(logits[n])[targets[n]]: logits (N, V), targets (N) i32/i64 -> ().
Tensor cross_entropy(const Tensor& logits, const Tensor& targets);

// Vocabulary-parallel form: this rank holds logits[:, vocab_start : vocab_start + Vs].
// Forward needs two reductions across the ranks sharing the vocabulary, supplied by the
// caller (the parallel layer passes communicator all-reduces):
//   max_all_reduce(row_max)  row_max (N) f32/f64, element-wise max over ranks, in place
//   sum_all_reduce(sums)     sums (N, 2): [sum_v exp(logit - max), target logit], sum, in place
// Every rank returns the same full loss; backward needs no communication.
struct VocabReductions {
  std::function<void(Tensor& row_max)> max_all_reduce;
  std::function<void(Tensor& sums)> sum_all_reduce;
};
Tensor cross_entropy_vocab_parallel(const Tensor& logits_shard, const Tensor& targets,
                                    int64_t vocab_start, const VocabReductions& reductions);

// ---- gradient plumbing -------------------------------------------------------------------------
// x itself (no copy); its backward passes x's gradient through and adds `grad` (leaf's shape
// and dtype, read when backward runs) to the leaf's gradient, as a part of that backward's
// contribution, ahead of everything recorded before this op. A pipeline's first stage hands
// the token embedding the lm_head's share of its gradient this way, where one process's
// backward computes it (the lm_head runs after the embedding, so its share comes first).
Tensor with_leaf_grad(const Tensor& x, const Tensor& leaf, const Tensor& grad);
// x itself (no copy); its backward passes x's gradient through and seeds `loss` (a scalar
// computed beside x, in x's graph) with gradient 1, as if it were added to the loss x's
// gradient comes from. A pipeline stage that is not the last adds its MoE blocks' auxiliary
// losses this way: their gradients flow on the stage holding the blocks, in its one backward.
Tensor with_side_loss(const Tensor& x, const Tensor& loss);

// ---- views and casts as free functions (the Tensor methods call these) ------------------------
Tensor view_op(const Tensor& x, Shape shape);
Tensor transpose_op(const Tensor& x, int64_t d0, int64_t d1);
Tensor narrow_op(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor select_op(const Tensor& x, int64_t dim, int64_t index);
Tensor contiguous_op(const Tensor& x);
Tensor cast_op(const Tensor& x, DataType dtype);
Tensor to_device_op(const Tensor& x, Device device);

}  // namespace chorus::tensor
