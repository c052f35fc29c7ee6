// LayerNorm, forward and backward (the derivation follows llm.c's layernorm_backward):
//   forward   norm = (x - mean) * rstd,  out = norm * w + b,  rstd = 1/sqrt(var + eps)
//   backward  dnorm = dout * w
//             dx += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
//             dw += sum_rows(dout * norm),  db += sum_rows(dout)
// Rows are independent, so they are split over the team; dw/db get one partial per block of
// kPartialRows rows, summed in block order at the end: no atomics, and the same bits whatever
// the thread count.
#include "cpu/layernorm.h"

#include <cmath>
#include <vector>

#include "cpu/simd.h"

namespace chorus::tensor::cpu {
namespace {

template <class T>
CHORUS_INLINE void fwd_rows(int64_t r0, int64_t r1, T* out, T* mean, T* rstd, const T* inp,
                            const T* w, const T* b, int64_t C, T eps) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* x = inp + r * C;
    T m = 0;
    for (int64_t i = 0; i < C; ++i) m += x[i];
    m /= T(C);
    T v = 0;
    for (int64_t i = 0; i < C; ++i) v += (x[i] - m) * (x[i] - m);
    v /= T(C);
    const T s = T(1) / std::sqrt(v + eps);
    T* o = out + r * C;
    for (int64_t i = 0; i < C; ++i) o[i] = (x[i] - m) * s * w[i] + b[i];
    mean[r] = m;
    rstd[r] = s;
  }
}

template <class T>
CHORUS_INLINE void bwd_rows(int64_t r0, int64_t r1, T* dinp, T* dw, T* db, const T* dout,
                            const T* inp, const T* w, const T* mean, const T* rstd, int64_t C) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* x = inp + r * C;
    const T* g = dout + r * C;
    const T m = mean[r], s = rstd[r];
    T dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int64_t i = 0; i < C; ++i) {
      const T norm = (x[i] - m) * s;
      const T dnorm = w[i] * g[i];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= T(C);
    dnorm_norm_mean /= T(C);
    for (int64_t i = 0; i < C; ++i) {
      const T norm = (x[i] - m) * s;
      db[i] += g[i];
      dw[i] += norm * g[i];
    }
    if (dinp != nullptr) {
      T* dx = dinp + r * C;
      for (int64_t i = 0; i < C; ++i) {
        const T norm = (x[i] - m) * s;
        dx[i] += (w[i] * g[i] - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }
  }
}

CHORUS_TARGET_CLONES void fwd_f32(int64_t r0, int64_t r1, float* out, float* mean, float* rstd,
                                  const float* inp, const float* w, const float* b, int64_t C,
                                  float eps) {
  fwd_rows(r0, r1, out, mean, rstd, inp, w, b, C, eps);
}
CHORUS_TARGET_CLONES void bwd_f32(int64_t r0, int64_t r1, float* dinp, float* dw, float* db,
                                  const float* dout, const float* inp, const float* w,
                                  const float* mean, const float* rstd, int64_t C) {
  bwd_rows(r0, r1, dinp, dw, db, dout, inp, w, mean, rstd, C);
}
inline void fwd_any(int64_t r0, int64_t r1, float* o, float* m, float* s, const float* x,
                    const float* w, const float* b, int64_t C, float eps) {
  fwd_f32(r0, r1, o, m, s, x, w, b, C, eps);
}
inline void fwd_any(int64_t r0, int64_t r1, double* o, double* m, double* s, const double* x,
                    const double* w, const double* b, int64_t C, double eps) {
  fwd_rows(r0, r1, o, m, s, x, w, b, C, eps);
}
inline void bwd_any(int64_t r0, int64_t r1, float* dx, float* dw, float* db, const float* g,
                    const float* x, const float* w, const float* m, const float* s, int64_t C) {
  bwd_f32(r0, r1, dx, dw, db, g, x, w, m, s, C);
}
inline void bwd_any(int64_t r0, int64_t r1, double* dx, double* dw, double* db, const double* g,
                    const double* x, const double* w, const double* m, const double* s, int64_t C) {
  bwd_rows(r0, r1, dx, dw, db, g, x, w, m, s, C);
}

}  // namespace

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t N, int64_t C, double eps) {
  parallel_for(N, 4 * C, [&](int64_t r0, int64_t r1, int) {
    fwd_any(r0, r1, out, mean, rstd, inp, weight, bias, C, T(eps));
  });
}

template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t N, int64_t C) {
  constexpr int64_t kPartialRows = 32;
  const int64_t blocks = (N + kPartialRows - 1) / kPartialRows;
  // Per-block dw/db partials: [block][0 = dw, 1 = db][C].
  std::vector<T> partial(static_cast<size_t>(blocks) * 2 * C, T(0));
  parallel_for(blocks, kPartialRows * 6 * C, [&](int64_t b0, int64_t b1, int) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      T* pw = partial.data() + static_cast<size_t>(blk) * 2 * C;
      bwd_any(blk * kPartialRows, std::min(N, (blk + 1) * kPartialRows), dinp, pw, pw + C, dout,
              inp, weight, mean, rstd, C);
    }
  });
  for (int64_t t = 0; t < blocks; ++t) {
    const T* pw = partial.data() + static_cast<size_t>(t) * 2 * C;
    for (int64_t i = 0; i < C; ++i) {
      if (dweight) dweight[i] += pw[i];
      if (dbias) dbias[i] += pw[C + i];
    }
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, int64_t, int64_t, double);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*,
                                        const double*, int64_t, int64_t, double);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int64_t, int64_t);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, int64_t,
                                         int64_t);

}  // namespace chorus::tensor::cpu
