// Internal: causal scaled-dot-product attention, heads as a dimension. T = float or double.
// Every operand is a (B, NH, T, HS) array given by a base pointer and the element strides of its
// first three dims (the head-size dim is contiguous), so q/k/v can be views into one qkv tensor
// and out/dq/dk/dv can be written straight into (B, T, NH, HS) layouts.
//   att (B, NH, T, T) contiguous: row t holds the softmax weights for s <= t, zeros after.
//   backward: dq, dk, dv += ... (or = ..., when `overwrite`: the buffers are uninitialised).
#pragma once

#include <cstdint>

namespace chorus::tensor::cpu {

struct AttentionStrides {
  int64_t b, h, t;  // element strides of dims 0..2 (dim 3 is contiguous)
};

template <class T>
struct AttentionOperand {
  T* data;
  AttentionStrides s;
  T* at(int64_t b, int64_t h) const { return data + b * s.b + h * s.h; }
};

template <class T>
void attention_forward(AttentionOperand<T> out, T* att, AttentionOperand<const T> q,
                       AttentionOperand<const T> k, AttentionOperand<const T> v, int64_t B,
                       int64_t NH, int64_t Tn, int64_t HS);
template <class T>
void attention_backward(AttentionOperand<T> dq, AttentionOperand<T> dk, AttentionOperand<T> dv,
                        bool overwrite, AttentionOperand<const T> dout, const T* att,
                        AttentionOperand<const T> q, AttentionOperand<const T> k,
                        AttentionOperand<const T> v, int64_t B, int64_t NH, int64_t Tn, int64_t HS);

}  // namespace chorus::tensor::cpu
