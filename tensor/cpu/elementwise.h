// Internal: element-wise kernels over contiguous arrays of n elements, for T = float or double
// (explicitly instantiated in elementwise.cc).
// Gradient rule: every backward kernel ACCUMULATES (+=) into its d* outputs.
#pragma once

#include <cstdint>

#include "chorus/types.h"

namespace chorus::tensor::cpu {

template <class T>
void add_forward(T* out, const T* a, const T* b, int64_t n);  // a + b
template <class T>
void sub_forward(T* out, const T* a, const T* b, int64_t n);  // a - b
template <class T>
void mul_forward(T* out, const T* a, const T* b, int64_t n);  // a * b
template <class T>
void scale_forward(T* out, const T* a, T s, int64_t n);  // s * a
template <class T>
void axpy(T* y, T alpha, const T* x, int64_t n);  // y += alpha x
// da += b * dout, db += a * dout (either may be null).
template <class T>
void mul_backward(T* da, T* db, const T* a, const T* b, const T* dout, int64_t n);
template <class T>
void gelu_forward(T* out, const T* inp, int64_t n);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n);
// Row broadcast and its gradient, out / dout (n, m), bias (m):
//   out[r, j] += bias[j];   dbias[j] (+)= sum_r dout[r, j]   (assigned when `assign`).
template <class T>
void add_bias_rows(T* out, const T* bias, int64_t n, int64_t m);
template <class T>
void sum_rows(T* dbias, const T* dout, int64_t n, int64_t m, bool assign);
// out[i] = bf16 bits of in[i], round to nearest even (quiet NaN stays NaN), like float_to_bf16.
void to_bf16(uint16_t* out, const float* in, int64_t n);
// out[i] = the f32 value of the bf16 bits in[i] (exact).
void from_bf16(float* out, const uint16_t* in, int64_t n);
// out[i] (+)= in[i] rounded to the nearest bf16 (dtype kBF16) or f16 (kF16) value, as f32;
// out may equal in.
void round_to(float* out, const float* in, int64_t n, DataType dtype, bool accumulate);
// Sums in double whatever T is.
template <class T>
double sum(const T* x, int64_t n);
template <class T>
double sum_squares(const T* x, int64_t n);

}  // namespace chorus::tensor::cpu
