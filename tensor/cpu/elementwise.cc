// Element-wise kernels. Each public function splits its range over the tensor thread team
// (parallel_for) and runs an ISA-cloned loop on each piece (see simd.h). Shapes: every array
// has n elements unless stated.
#include "cpu/elementwise.h"

#include <cmath>
#include <vector>

#include "chorus/half.h"
#include "cpu/simd.h"

namespace chorus::tensor::cpu {
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
CHORUS_TARGET_CLONES void gelu_fwd_f32(float* o, const float* x, int64_t n) {
  gelu_fwd_loop(o, x, n);
}
CHORUS_TARGET_CLONES void gelu_bwd_f32(float* d, const float* x, const float* g, int64_t n) {
  gelu_bwd_loop(d, x, g, n);
}
CHORUS_TARGET_CLONES void add_f32(float* o, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
}
CHORUS_TARGET_CLONES void axpy_f32(float* y, float alpha, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}
CHORUS_TARGET_CLONES void add_bias_f32(float* out, const float* bias, int64_t r0, int64_t r1,
                                       int64_t m) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t j = 0; j < m; ++j) out[r * m + j] += bias[j];
}
// Columns [j0, j1) of the row sums.
CHORUS_TARGET_CLONES void sum_rows_f32(float* db, const float* g, int64_t n, int64_t m, int64_t j0,
                                       int64_t j1, bool assign) {
  if (assign)
    for (int64_t j = j0; j < j1; ++j) db[j] = 0.f;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = j0; j < j1; ++j) db[j] += g[r * m + j];
}
CHORUS_TARGET_CLONES void to_bf16_f32(uint16_t* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
}
CHORUS_TARGET_CLONES void from_bf16_f32(float* out, const uint16_t* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
}
CHORUS_TARGET_CLONES void round_bf16_f32(float* out, const float* in, int64_t n, bool acc) {
  if (acc)
    for (int64_t i = 0; i < n; ++i) out[i] += bf16_to_float(float_to_bf16(in[i]));
  else
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(float_to_bf16(in[i]));
}
CHORUS_TARGET_CLONES void round_f16_f32(float* out, const float* in, int64_t n, bool acc) {
  if (acc)
    for (int64_t i = 0; i < n; ++i) out[i] += half_to_float(float_to_half(in[i]));
  else
    for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(float_to_half(in[i]));
}
// ... and plain versions for f64 (tests only).
void add_bias_f64(double* out, const double* bias, int64_t r0, int64_t r1, int64_t m) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t j = 0; j < m; ++j) out[r * m + j] += bias[j];
}
void sum_rows_f64(double* db, const double* g, int64_t n, int64_t m, int64_t j0, int64_t j1,
                  bool assign) {
  if (assign)
    for (int64_t j = j0; j < j1; ++j) db[j] = 0.0;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = j0; j < j1; ++j) db[j] += g[r * m + j];
}
inline void add_bias_any(float* o, const float* b, int64_t r0, int64_t r1, int64_t m) {
  add_bias_f32(o, b, r0, r1, m);
}
inline void add_bias_any(double* o, const double* b, int64_t r0, int64_t r1, int64_t m) {
  add_bias_f64(o, b, r0, r1, m);
}
inline void sum_rows_any(float* d, const float* g, int64_t n, int64_t m, int64_t j0, int64_t j1,
                         bool assign) {
  sum_rows_f32(d, g, n, m, j0, j1, assign);
}
inline void sum_rows_any(double* d, const double* g, int64_t n, int64_t m, int64_t j0, int64_t j1,
                         bool assign) {
  sum_rows_f64(d, g, n, m, j0, j1, assign);
}
void gelu_fwd_f64(double* o, const double* x, int64_t n) { gelu_fwd_loop(o, x, n); }
void gelu_bwd_f64(double* d, const double* x, const double* g, int64_t n) {
  gelu_bwd_loop(d, x, g, n);
}
void add_f64(double* o, const double* a, const double* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
}
void axpy_f64(double* y, double alpha, const double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

inline void gelu_fwd_any(float* o, const float* x, int64_t n) { gelu_fwd_f32(o, x, n); }
inline void gelu_fwd_any(double* o, const double* x, int64_t n) { gelu_fwd_f64(o, x, n); }
inline void gelu_bwd_any(float* d, const float* x, const float* g, int64_t n) {
  gelu_bwd_f32(d, x, g, n);
}
inline void gelu_bwd_any(double* d, const double* x, const double* g, int64_t n) {
  gelu_bwd_f64(d, x, g, n);
}
inline void add_any(float* o, const float* a, const float* b, int64_t n) { add_f32(o, a, b, n); }
inline void add_any(double* o, const double* a, const double* b, int64_t n) { add_f64(o, a, b, n); }
inline void axpy_any(float* y, float s, const float* x, int64_t n) { axpy_f32(y, s, x, n); }
inline void axpy_any(double* y, double s, const double* x, int64_t n) { axpy_f64(y, s, x, n); }

template <class T>
double sum_impl(const T* x, int64_t n, bool squares) {
  // Partials in double (sums feed losses and gradient norms, where f32 accumulation over
  // millions of elements would drift), one per block of kBlock elements, added in block order:
  // the same bits whatever the thread count.
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  parallel_for(blocks, kBlock, [&](int64_t b0, int64_t b1, int) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      double acc = 0;
      for (int64_t i = blk * kBlock; i < std::min(n, (blk + 1) * kBlock); ++i)
        acc += squares ? double(x[i]) * double(x[i]) : double(x[i]);
      partial[static_cast<size_t>(blk)] = acc;
    }
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
  parallel_for(
      n, 8, [&](int64_t s, int64_t e, int) { gelu_bwd_any(dinp + s, inp + s, dout + s, e - s); });
}
void to_bf16(uint16_t* out, const float* in, int64_t n) {
  parallel_for(n, 1, [&](int64_t s, int64_t e, int) { to_bf16_f32(out + s, in + s, e - s); });
}

void from_bf16(float* out, const uint16_t* in, int64_t n) {
  parallel_for(n, 1, [&](int64_t s, int64_t e, int) { from_bf16_f32(out + s, in + s, e - s); });
}

void round_to(float* out, const float* in, int64_t n, DataType dtype, bool accumulate) {
  parallel_for(n, 2, [&](int64_t s, int64_t e, int) {
    if (dtype == DataType::kBF16)
      round_bf16_f32(out + s, in + s, e - s, accumulate);
    else
      round_f16_f32(out + s, in + s, e - s, accumulate);
  });
}

template <class T>
void add_bias_rows(T* out, const T* bias, int64_t n, int64_t m) {
  parallel_for(n, m, [&](int64_t r0, int64_t r1, int) { add_bias_any(out, bias, r0, r1, m); });
}
template <class T>
void sum_rows(T* dbias, const T* dout, int64_t n, int64_t m, bool assign) {
  // Column blocks of 64 over the team: each output element is summed by one thread, in row
  // order, so the result does not depend on the thread count.
  const int64_t blocks = (m + 63) / 64;
  parallel_for(blocks, 64 * n, [&](int64_t b0, int64_t b1, int) {
    sum_rows_any(dbias, dout, n, m, b0 * 64, std::min(m, b1 * 64), assign);
  });
}
template <class T>
double sum(const T* x, int64_t n) {
  return sum_impl(x, n, false);
}
template <class T>
double sum_squares(const T* x, int64_t n) {
  return sum_impl(x, n, true);
}

#define CHORUS_INSTANTIATE(T)                                                   \
  template void add_forward<T>(T*, const T*, const T*, int64_t);                \
  template void sub_forward<T>(T*, const T*, const T*, int64_t);                \
  template void mul_forward<T>(T*, const T*, const T*, int64_t);                \
  template void scale_forward<T>(T*, const T*, T, int64_t);                     \
  template void axpy<T>(T*, T, const T*, int64_t);                              \
  template void mul_backward<T>(T*, T*, const T*, const T*, const T*, int64_t); \
  template void gelu_forward<T>(T*, const T*, int64_t);                         \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t);              \
  template void add_bias_rows<T>(T*, const T*, int64_t, int64_t);               \
  template void sum_rows<T>(T*, const T*, int64_t, int64_t, bool);              \
  template double sum<T>(const T*, int64_t);                                    \
  template double sum_squares<T>(const T*, int64_t);
CHORUS_INSTANTIATE(float)
CHORUS_INSTANTIATE(double)
#undef CHORUS_INSTANTIATE

}  // namespace chorus::tensor::cpu
