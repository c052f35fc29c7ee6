// Internal: causal scaled-dot-product attention, heads as a dimension. T = float or double.
//   q, k, v   (B, NH, T, HS) with arbitrary outer strides, innermost stride 1
//   out       (B, NH, T, HS) contiguous
//   att       (B, NH, T, T)  contiguous; row t holds the softmax weights for s <= t, zeros after
//   dq, dk, dv (B, NH, T, HS) contiguous; backward accumulates (+=) into them.
#pragma once

#include <cstdint>

namespace chorus::tensor::kernels {

struct AttentionStrides {
  int64_t b, h, t;  // element strides of dims 0..2 (dim 3 is contiguous)
};

template <class T>
void attention_forward(T* out, T* att, const T* q, AttentionStrides qs, const T* k,
                       AttentionStrides ks, const T* v, AttentionStrides vs, int64_t B, int64_t NH,
                       int64_t Tn, int64_t HS);
template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q,
                        AttentionStrides qs, const T* k, AttentionStrides ks, const T* v,
                        AttentionStrides vs, int64_t B, int64_t NH, int64_t Tn, int64_t HS);

}  // namespace chorus::tensor::kernels
