// Causal self-attention (the llm.c CPU scheme, heads as a dimension):
//   forward, per (b, h, t):  pre[s] = q_t . k_s / sqrt(HS) for s <= t
//                            att[s] = softmax_s(pre),  out_t = sum_s att[s] v_s
//   backward, per (b, h, t): datt[s] = dout_t . v_s,   dv_s += att[s] dout_t
//                            dpre[s] = att[s] (datt[s] - sum_s' att[s'] datt[s'])
//                            dq_t += sum_s dpre[s] k_s / sqrt(HS),  dk_s += dpre[s] q_t / sqrt(HS)
// Cost: B NH T^2 HS multiply-adds forward (half of that masked away), twice that backward;
// memory: the (B, NH, T, T) weights are saved. (b, h) pairs are independent and split over the
// team; each writes only its own slices of dq/dk/dv.
#include "kernels/attention.h"

#include <cmath>
#include <vector>

#include "kernels/simd.h"

namespace chorus::tensor::kernels {
namespace {

template <class T>
CHORUS_INLINE T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <class T>
CHORUS_INLINE void fwd_pairs(int64_t p0, int64_t p1, T* out, T* att, const T* q,
                             AttentionStrides qs, const T* k, AttentionStrides ks, const T* v,
                             AttentionStrides vs, int64_t NH, int64_t Tn, int64_t HS) {
  const T scale = T(1) / std::sqrt(T(HS));
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t b = p / NH, h = p % NH;
    const T* qb = q + b * qs.b + h * qs.h;
    const T* kb = k + b * ks.b + h * ks.h;
    const T* vb = v + b * vs.b + h * vs.h;
    T* ob = out + p * Tn * HS;
    T* ab = att + p * Tn * Tn;
    for (int64_t t = 0; t < Tn; ++t) {
      const T* qt = qb + t * qs.t;
      T* arow = ab + t * Tn;
      T mx = -INFINITY;
      for (int64_t s = 0; s <= t; ++s) {
        arow[s] = dot(qt, kb + s * ks.t, HS) * scale;
        mx = arow[s] > mx ? arow[s] : mx;
      }
      T sum = 0;
      for (int64_t s = 0; s <= t; ++s) {
        arow[s] = k_exp(arow[s] - mx);
        sum += arow[s];
      }
      const T inv = T(1) / sum;
      for (int64_t s = 0; s <= t; ++s) arow[s] *= inv;
      for (int64_t s = t + 1; s < Tn; ++s) arow[s] = T(0);
      T* ot = ob + t * HS;
      for (int64_t i = 0; i < HS; ++i) ot[i] = T(0);
      for (int64_t s = 0; s <= t; ++s) {
        const T a = arow[s];
        const T* vt = vb + s * vs.t;
        for (int64_t i = 0; i < HS; ++i) ot[i] += a * vt[i];
      }
    }
  }
}

template <class T>
CHORUS_INLINE void bwd_pairs(int64_t p0, int64_t p1, T* dq, T* dk, T* dv, const T* dout,
                             const T* att, const T* q, AttentionStrides qs, const T* k,
                             AttentionStrides ks, const T* v, AttentionStrides vs, int64_t NH,
                             int64_t Tn, int64_t HS, T* datt) {
  const T scale = T(1) / std::sqrt(T(HS));
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t b = p / NH, h = p % NH;
    const T* qb = q + b * qs.b + h * qs.h;
    const T* kb = k + b * ks.b + h * ks.h;
    const T* vb = v + b * vs.b + h * vs.h;
    const T* gb = dout + p * Tn * HS;
    const T* ab = att + p * Tn * Tn;
    T* dqb = dq + p * Tn * HS;
    T* dkb = dk + p * Tn * HS;
    T* dvb = dv + p * Tn * HS;
    for (int64_t t = 0; t < Tn; ++t) {
      const T* arow = ab + t * Tn;
      const T* gt = gb + t * HS;
      T weighted = 0;
      for (int64_t s = 0; s <= t; ++s) {
        datt[s] = dot(gt, vb + s * vs.t, HS);
        weighted += arow[s] * datt[s];
        T* dvs = dvb + s * HS;
        const T a = arow[s];
        for (int64_t i = 0; i < HS; ++i) dvs[i] += a * gt[i];
      }
      const T* qt = qb + t * qs.t;
      T* dqt = dqb + t * HS;
      for (int64_t s = 0; s <= t; ++s) {
        const T dpre = arow[s] * (datt[s] - weighted) * scale;
        const T* ksr = kb + s * ks.t;
        T* dks = dkb + s * HS;
        for (int64_t i = 0; i < HS; ++i) {
          dqt[i] += dpre * ksr[i];
          dks[i] += dpre * qt[i];
        }
      }
    }
  }
}

CHORUS_TARGET_CLONES void fwd_f32(int64_t p0, int64_t p1, float* out, float* att, const float* q,
                                  AttentionStrides qs, const float* k, AttentionStrides ks,
                                  const float* v, AttentionStrides vs, int64_t NH, int64_t Tn,
                                  int64_t HS) {
  fwd_pairs(p0, p1, out, att, q, qs, k, ks, v, vs, NH, Tn, HS);
}
CHORUS_TARGET_CLONES void bwd_f32(int64_t p0, int64_t p1, float* dq, float* dk, float* dv,
                                  const float* dout, const float* att, const float* q,
                                  AttentionStrides qs, const float* k, AttentionStrides ks,
                                  const float* v, AttentionStrides vs, int64_t NH, int64_t Tn,
                                  int64_t HS, float* datt) {
  bwd_pairs(p0, p1, dq, dk, dv, dout, att, q, qs, k, ks, v, vs, NH, Tn, HS, datt);
}
inline void fwd_any(int64_t p0, int64_t p1, float* o, float* a, const float* q,
                    AttentionStrides qs, const float* k, AttentionStrides ks, const float* v,
                    AttentionStrides vs, int64_t NH, int64_t Tn, int64_t HS) {
  fwd_f32(p0, p1, o, a, q, qs, k, ks, v, vs, NH, Tn, HS);
}
inline void fwd_any(int64_t p0, int64_t p1, double* o, double* a, const double* q,
                    AttentionStrides qs, const double* k, AttentionStrides ks, const double* v,
                    AttentionStrides vs, int64_t NH, int64_t Tn, int64_t HS) {
  fwd_pairs(p0, p1, o, a, q, qs, k, ks, v, vs, NH, Tn, HS);
}
inline void bwd_any(int64_t p0, int64_t p1, float* dq, float* dk, float* dv, const float* g,
                    const float* a, const float* q, AttentionStrides qs, const float* k,
                    AttentionStrides ks, const float* v, AttentionStrides vs, int64_t NH,
                    int64_t Tn, int64_t HS, float* datt) {
  bwd_f32(p0, p1, dq, dk, dv, g, a, q, qs, k, ks, v, vs, NH, Tn, HS, datt);
}
inline void bwd_any(int64_t p0, int64_t p1, double* dq, double* dk, double* dv, const double* g,
                    const double* a, const double* q, AttentionStrides qs, const double* k,
                    AttentionStrides ks, const double* v, AttentionStrides vs, int64_t NH,
                    int64_t Tn, int64_t HS, double* datt) {
  bwd_pairs(p0, p1, dq, dk, dv, g, a, q, qs, k, ks, v, vs, NH, Tn, HS, datt);
}

}  // namespace

template <class T>
void attention_forward(T* out, T* att, const T* q, AttentionStrides qs, const T* k,
                       AttentionStrides ks, const T* v, AttentionStrides vs, int64_t B, int64_t NH,
                       int64_t Tn, int64_t HS) {
  parallel_for(B * NH, Tn * Tn * HS, [&](int64_t p0, int64_t p1, int) {
    fwd_any(p0, p1, out, att, q, qs, k, ks, v, vs, NH, Tn, HS);
  });
}

template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q,
                        AttentionStrides qs, const T* k, AttentionStrides ks, const T* v,
                        AttentionStrides vs, int64_t B, int64_t NH, int64_t Tn, int64_t HS) {
  parallel_for(B * NH, 2 * Tn * Tn * HS, [&](int64_t p0, int64_t p1, int) {
    std::vector<T> datt(static_cast<size_t>(Tn));  // per-thread scratch
    bwd_any(p0, p1, dq, dk, dv, dout, att, q, qs, k, ks, v, vs, NH, Tn, HS, datt.data());
  });
}

template void attention_forward<float>(float*, float*, const float*, AttentionStrides,
                                       const float*, AttentionStrides, const float*,
                                       AttentionStrides, int64_t, int64_t, int64_t, int64_t);
template void attention_forward<double>(double*, double*, const double*, AttentionStrides,
                                        const double*, AttentionStrides, const double*,
                                        AttentionStrides, int64_t, int64_t, int64_t, int64_t);
template void attention_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, AttentionStrides, const float*,
                                        AttentionStrides, const float*, AttentionStrides, int64_t,
                                        int64_t, int64_t, int64_t);
template void attention_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, AttentionStrides, const double*,
                                         AttentionStrides, const double*, AttentionStrides,
                                         int64_t, int64_t, int64_t, int64_t);

}  // namespace chorus::tensor::kernels
