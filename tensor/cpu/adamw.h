// Internal: the AdamW update over n contiguous elements (llm.c's adamw kernel).
#pragma once

#include <cstdint>

namespace chorus::tensor::cpu {

// m, v, param updated in place; beta1_correction = 1 - beta1^t, beta2_correction = 1 - beta2^t.
template <class T>
void adamw_update(T* param, const T* grad, T* m, T* v, int64_t n, float lr, float beta1,
                  float beta2, float beta1_correction, float beta2_correction, float eps,
                  float weight_decay);

}  // namespace chorus::tensor::cpu
