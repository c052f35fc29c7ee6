// Internal: layer normalisation over the last dim (llm.c layout). T = float or double.
//   inp, out, dinp, dout (N, C); weight, bias, dweight, dbias (C); mean, rstd (N).
// Backward accumulates (+=) into dinp, dweight, dbias (any may be null).
#pragma once

#include <cstdint>

namespace chorus::tensor::cpu {

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t N, int64_t C, double eps);
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t N, int64_t C);

}  // namespace chorus::tensor::cpu
