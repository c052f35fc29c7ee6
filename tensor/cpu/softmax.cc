// Softmax and softmax cross-entropy. Numerically stable form: subtract the row max before exp.
// Cross-entropy never materialises probabilities in forward: it keeps (max, sumexp) per row and
// backward recomputes p = exp(logit - max) / sumexp, so an (N, V) buffer is saved only once
// (the logits). The per-row pieces are split out so the vocabulary-parallel form can reduce
// max and sums across ranks between them.
#include "cpu/softmax.h"

#include <cmath>

#include "cpu/simd.h"

namespace chorus::tensor::cpu {
namespace {

template <class T>
CHORUS_INLINE T max_of(const T* x, int64_t V) {
  T m = x[0];
  for (int64_t v = 1; v < V; ++v) m = x[v] > m ? x[v] : m;
  return m;
}

template <class T>
CHORUS_INLINE void softmax_rows(int64_t r0, int64_t r1, T* y, const T* x, int64_t V) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * V;
    T* yr = y + r * V;
    const T m = max_of(xr, V);
    T s = 0;
    for (int64_t v = 0; v < V; ++v) {
      yr[v] = k_exp(xr[v] - m);
      s += yr[v];
    }
    const T inv = T(1) / s;
    for (int64_t v = 0; v < V; ++v) yr[v] *= inv;
  }
}

template <class T>
CHORUS_INLINE T exp_sum_row(const T* xr, T m, int64_t V) {
  T s = 0;
  for (int64_t v = 0; v < V; ++v) s += k_exp(xr[v] - m);
  return s;
}

template <class T>
CHORUS_INLINE void ce_grad_row(T* dr, const T* xr, T m, T scale_over_sum, int64_t V) {
  for (int64_t v = 0; v < V; ++v) dr[v] += k_exp(xr[v] - m) * scale_over_sum;
}

CHORUS_TARGET_CLONES void softmax_f32(int64_t r0, int64_t r1, float* y, const float* x, int64_t V) {
  softmax_rows(r0, r1, y, x, V);
}
CHORUS_TARGET_CLONES float exp_sum_f32(const float* xr, float m, int64_t V) {
  return exp_sum_row(xr, m, V);
}
CHORUS_TARGET_CLONES void ce_grad_f32(float* dr, const float* xr, float m, float k, int64_t V) {
  ce_grad_row(dr, xr, m, k, V);
}
inline void softmax_any(int64_t r0, int64_t r1, float* y, const float* x, int64_t V) {
  softmax_f32(r0, r1, y, x, V);
}
inline void softmax_any(int64_t r0, int64_t r1, double* y, const double* x, int64_t V) {
  softmax_rows(r0, r1, y, x, V);
}
inline float exp_sum_any(const float* x, float m, int64_t V) { return exp_sum_f32(x, m, V); }
inline double exp_sum_any(const double* x, double m, int64_t V) { return exp_sum_row(x, m, V); }
inline void ce_grad_any(float* d, const float* x, float m, float k, int64_t V) {
  ce_grad_f32(d, x, m, k, V);
}
inline void ce_grad_any(double* d, const double* x, double m, double k, int64_t V) {
  ce_grad_row(d, x, m, k, V);
}

}  // namespace

template <class T>
void softmax_forward(T* y, const T* x, int64_t N, int64_t V) {
  parallel_for(N, 8 * V, [&](int64_t r0, int64_t r1, int) { softmax_any(r0, r1, y, x, V); });
}

template <class T>
void softmax_backward(T* dx, const T* y, const T* dy, int64_t N, int64_t V) {
  parallel_for(N, 3 * V, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* yr = y + r * V;
      const T* gr = dy + r * V;
      T dot = 0;
      for (int64_t v = 0; v < V; ++v) dot += yr[v] * gr[v];
      T* dr = dx + r * V;
      for (int64_t v = 0; v < V; ++v) dr[v] += yr[v] * (gr[v] - dot);
    }
  });
}

template <class T>
void row_max(T* out, const T* logits, int64_t N, int64_t V) {
  parallel_for(N, V, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) out[r] = max_of(logits + r * V, V);
  });
}

template <class T, class I>
void exp_sums_and_target(T* sums, const T* logits, const T* rmax, const I* targets,
                         int64_t vocab_start, int64_t N, int64_t V) {
  parallel_for(N, 8 * V, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = logits + r * V;
      sums[2 * r] = exp_sum_any(xr, rmax[r], V);
      const int64_t t = static_cast<int64_t>(targets[r]) - vocab_start;
      sums[2 * r + 1] = (t >= 0 && t < V) ? xr[t] : T(0);
    }
  });
}

template <class T, class I>
void cross_entropy_backward(T* dlogits, const T* logits, const T* rmax, const T* sums,
                            const I* targets, int64_t vocab_start, int64_t N, int64_t V, T scale) {
  parallel_for(N, 8 * V, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      T* dr = dlogits + r * V;
      ce_grad_any(dr, logits + r * V, rmax[r], scale / sums[2 * r], V);
      const int64_t t = static_cast<int64_t>(targets[r]) - vocab_start;
      if (t >= 0 && t < V) dr[t] -= scale;
    }
  });
}

#define CHORUS_INSTANTIATE_T(T)                                                \
  template void softmax_forward<T>(T*, const T*, int64_t, int64_t);            \
  template void softmax_backward<T>(T*, const T*, const T*, int64_t, int64_t); \
  template void row_max<T>(T*, const T*, int64_t, int64_t);
#define CHORUS_INSTANTIATE_TI(T, I)                                                               \
  template void exp_sums_and_target<T, I>(T*, const T*, const T*, const I*, int64_t, int64_t,     \
                                          int64_t);                                               \
  template void cross_entropy_backward<T, I>(T*, const T*, const T*, const T*, const I*, int64_t, \
                                             int64_t, int64_t, T);
CHORUS_INSTANTIATE_T(float)
CHORUS_INSTANTIATE_T(double)
CHORUS_INSTANTIATE_TI(float, int32_t)
CHORUS_INSTANTIATE_TI(float, int64_t)
CHORUS_INSTANTIATE_TI(double, int32_t)
CHORUS_INSTANTIATE_TI(double, int64_t)
#undef CHORUS_INSTANTIATE_T
#undef CHORUS_INSTANTIATE_TI

}  // namespace chorus::tensor::cpu
