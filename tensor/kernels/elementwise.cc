// Element-wise kernels. Each public function splits its range over the OpenMP team and runs an
// ISA-cloned loop on each piece (see simd.h). Shapes: every array has n elements.
#include "kernels/elementwise.h"

#include <cmath>

#include "kernels/simd.h"

namespace chorus::tensor::kernels {
namespace {

// GELU, tanh approximation (GPT-2):
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2/pi)

template <class T>
CHORUS_INLINE void gelu_fwd_loop(T* out, const T* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = T(kGeluScale) * (x + T(0.044715) * x * x * x);
    out[i] = T(0.5) * x * (T(1) + k_tanh(u));
  }
}

template <class T>
CHORUS_INLINE void gelu_bwd_loop(T* dinp, const T* inp, const T* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = T(kGeluScale) * (x + T(0.044715) * x * x * x);
    const T th = k_tanh(u);
    const T sech2 = T(1) - th * th;
    const T local = T(0.5) * (T(1) + th) +
                    T(0.5) * x * sech2 * T(kGeluScale) * (T(1) + T(3 * 0.044715) * x * x);
    dinp[i] += local * dout[i];
  }
}

// f32 clones (the hot path) ...
CHORUS_TARGET_CLONES void gelu_fwd_f32(float* o, const float* x, int64_t n) { gelu_fwd_loop(o, x, n); }
CHORUS_TARGET_CLONES void gelu_bwd_f32(float* d, const float* x, const float* g, int64_t n) {
  gelu_bwd_loop(d, x, g, n);
}
CHORUS_TARGET_CLONES void add_f32(float* o, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
}
CHORUS_TARGET_CLONES void axpy_f32(float* y, float alpha, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}
// ... and plain versions for f64 (tests only).
void gelu_fwd_f64(double* o, const double* x, int64_t n) { gelu_fwd_loop(o, x, n); }
void gelu_bwd_f64(double* d, const double* x, const double* g, int64_t n) { gelu_bwd_loop(d, x, g, n); }
void add_f64(double* o, const double* a, const double* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
}
void axpy_f64(double* y, double alpha, const double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

inline void gelu_fwd_any(float* o, const float* x, int64_t n) { gelu_fwd_f32(o, x, n); }
inline void gelu_fwd_any(double* o, const double* x, int64_t n) { gelu_fwd_f64(o, x, n); }
inline void gelu_bwd_any(float* d, const float* x, const float* g, int64_t n) { gelu_bwd_f32(d, x, g, n); }
inline void gelu_bwd_any(double* d, const double* x, const double* g, int64_t n) { gelu_bwd_f64(d, x, g, n); }
inline void add_any(float* o, const float* a, const float* b, int64_t n) { add_f32(o, a, b, n); }
inline void add_any(double* o, const double* a, const double* b, int64_t n) { add_f64(o, a, b, n); }
inline void axpy_any(float* y, float s, const float* x, int64_t n) { axpy_f32(y, s, x, n); }
inline void axpy_any(double* y, double s, const double* x, int64_t n) { axpy_f64(y, s, x, n); }

template <class T>
double sum_impl(const T* x, int64_t n, bool squares) {
  // Per-thread partials in double: sums feed losses and gradient norms, where f32 accumulation
  // over millions of elements would drift.
  double partial[256] = {};
  parallel_for(n, 1, [&](int64_t b, int64_t e, int t) {
    double acc = 0;
    for (int64_t i = b; i < e; ++i) acc += squares ? double(x[i]) * double(x[i]) : double(x[i]);
    partial[t] = acc;
  });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace

template <class T>
void add_forward(T* out, const T* a, const T* b, int64_t n) {
  parallel_for(n, 1, [&](int64_t s, int64_t e, int) { add_any(out + s, a + s, b + s, e - s); });
}
template <class T>
void sub_forward(T* out, const T* a, const T* b, int64_t n) {
  parallel_for(n, 1, [&](int64_t s, int64_t e, int) {
    for (int64_t i = s; i < e; ++i) out[i] = a[i] - b[i];
  });
}
template <class T>
void mul_forward(T* out, const T* a, const T* b, int64_t n) {
  parallel_for(n, 1, [&](int64_t s, int64_t e, int) {
    for (int64_t i = s; i < e; ++i) out[i] = a[i] * b[i];
  });
}
template <class T>
void scale_forward(T* out, const T* a, T f, int64_t n) {
  parallel_for(n, 1, [&](int64_t s, int64_t e, int) {
    for (int64_t i = s; i < e; ++i) out[i] = f * a[i];
  });
}
template <class T>
void axpy(T* y, T alpha, const T* x, int64_t n) {
  parallel_for(n, 1, [&](int64_t s, int64_t e, int) { axpy_any(y + s, alpha, x + s, e - s); });
}
template <class T>
void mul_backward(T* da, T* db, const T* a, const T* b, const T* dout, int64_t n) {
  parallel_for(n, 1, [&](int64_t s, int64_t e, int) {
    if (da)
      for (int64_t i = s; i < e; ++i) da[i] += b[i] * dout[i];
    if (db)
      for (int64_t i = s; i < e; ++i) db[i] += a[i] * dout[i];
  });
}
template <class T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  parallel_for(n, 8, [&](int64_t s, int64_t e, int) { gelu_fwd_any(out + s, inp + s, e - s); });
}
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
  parallel_for(n, 8, [&](int64_t s, int64_t e, int) {
    gelu_bwd_any(dinp + s, inp + s, dout + s, e - s);
  });
}
template <class T>
double sum(const T* x, int64_t n) { return sum_impl(x, n, false); }
template <class T>
double sum_squares(const T* x, int64_t n) { return sum_impl(x, n, true); }

#define CHORUS_INSTANTIATE(T)                                                        \
  template void add_forward<T>(T*, const T*, const T*, int64_t);                     \
  template void sub_forward<T>(T*, const T*, const T*, int64_t);                     \
  template void mul_forward<T>(T*, const T*, const T*, int64_t);                     \
  template void scale_forward<T>(T*, const T*, T, int64_t);                          \
  template void axpy<T>(T*, T, const T*, int64_t);                                   \
  template void mul_backward<T>(T*, T*, const T*, const T*, const T*, int64_t);      \
  template void gelu_forward<T>(T*, const T*, int64_t);                              \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t);                   \
  template double sum<T>(const T*, int64_t);                                         \
  template double sum_squares<T>(const T*, int64_t);
CHORUS_INSTANTIATE(float)
CHORUS_INSTANTIATE(double)
#undef CHORUS_INSTANTIATE

}  // namespace chorus::tensor::kernels
