#include "cpu/adamw.h"

#include <cmath>

#include "cpu/simd.h"

namespace chorus::tensor::cpu {
namespace {

template <class T>
CHORUS_INLINE void adamw_loop(T* p, const T* g, T* m, T* v, int64_t n, T lr, T b1, T b2, T c1, T c2,
                              T eps, T wd) {
  for (int64_t i = 0; i < n; ++i) {
    const T mi = b1 * m[i] + (T(1) - b1) * g[i];
    const T vi = b2 * v[i] + (T(1) - b2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    const T mhat = mi / c1, vhat = vi / c2;
    p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * p[i]);
  }
}

CHORUS_TARGET_CLONES void adamw_f32(float* p, const float* g, float* m, float* v, int64_t n,
                                    float lr, float b1, float b2, float c1, float c2, float eps,
                                    float wd) {
  adamw_loop(p, g, m, v, n, lr, b1, b2, c1, c2, eps, wd);
}
inline void adamw_any(float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1,
                      float b2, float c1, float c2, float eps, float wd) {
  adamw_f32(p, g, m, v, n, lr, b1, b2, c1, c2, eps, wd);
}
inline void adamw_any(double* p, const double* g, double* m, double* v, int64_t n, float lr,
                      float b1, float b2, float c1, float c2, float eps, float wd) {
  adamw_loop<double>(p, g, m, v, n, lr, b1, b2, c1, c2, eps, wd);
}

}  // namespace

template <class T>
void adamw_update(T* param, const T* grad, T* m, T* v, int64_t n, float lr, float beta1,
                  float beta2, float c1, float c2, float eps, float wd) {
  parallel_for(n, 8, [&](int64_t b, int64_t e, int) {
    adamw_any(param + b, grad + b, m + b, v + b, e - b, lr, beta1, beta2, c1, c2, eps, wd);
  });
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, float, float,
                                  float, float, float, float, float);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, float, float,
                                   float, float, float, float, float);

}  // namespace chorus::tensor::cpu
