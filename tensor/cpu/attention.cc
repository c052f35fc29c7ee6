// Causal self-attention, heads as a dimension, as batched GEMMs: one (b, h) pair is a task.
//   forward, per pair:   S = q k^T / sqrt(HS)           (T x T, GEMM)
//                        P = causal softmax of S by row  (s > t masked to 0; P is saved as att)
//                        out = P v                       (T x HS, GEMM)
//   backward, per pair:  dP = dout v^T                   (GEMM)     dv += P^T dout  (GEMM)
//                        dS = P (dP - rowsum(P dP)) / sqrt(HS)
//                        dq += dS k                      (GEMM)     dk += dS^T q    (GEMM)
// The GEMMs cover the full T x T square (the masked half is computed and discarded: at these
// sizes a GEMM at full speed beats a triangular loop at a tenth of it). Cost per pair: 2 T^2 HS
// multiply-adds forward, 4 T^2 HS backward; memory: the (B, NH, T, T) weights are saved.
// Pairs are independent and split over the team; each writes only its own slices of
// out/att/dq/dk/dv, and GEMMs inside a task run on that task's thread.
#include "cpu/attention.h"

#include <cmath>
#include <vector>

#include "chorus/tensor/gemm.h"
#include "cpu/simd.h"

namespace chorus::tensor::cpu {
namespace {

// Rows of S (T x T, row stride T) -> causal softmax in place: row t keeps s <= t.
template <class T>
CHORUS_INLINE void causal_softmax_rows(T* S, int64_t Tn) {
  for (int64_t t = 0; t < Tn; ++t) {
    T* row = S + t * Tn;
    T mx = row[0];
    for (int64_t s = 1; s <= t; ++s) mx = row[s] > mx ? row[s] : mx;
    T sum = 0;
    for (int64_t s = 0; s <= t; ++s) {
      row[s] = k_exp(row[s] - mx);
      sum += row[s];
    }
    const T inv = T(1) / sum;
    for (int64_t s = 0; s <= t; ++s) row[s] *= inv;
    for (int64_t s = t + 1; s < Tn; ++s) row[s] = T(0);
  }
}

// dP (T x T) -> dS = P (dP - rowsum(P dP)) * scale in place.
template <class T>
CHORUS_INLINE void softmax_grad_rows(T* dP, const T* P, int64_t Tn, T scale) {
  for (int64_t t = 0; t < Tn; ++t) {
    T* d = dP + t * Tn;
    const T* p = P + t * Tn;
    T dot = 0;
    for (int64_t s = 0; s < Tn; ++s) dot += p[s] * d[s];
    for (int64_t s = 0; s < Tn; ++s) d[s] = p[s] * (d[s] - dot) * scale;
  }
}

CHORUS_TARGET_CLONES void causal_softmax_f32(float* S, int64_t Tn) { causal_softmax_rows(S, Tn); }
CHORUS_TARGET_CLONES void softmax_grad_f32(float* dP, const float* P, int64_t Tn, float scale) {
  softmax_grad_rows(dP, P, Tn, scale);
}
inline void causal_softmax_any(float* S, int64_t Tn) { causal_softmax_f32(S, Tn); }
inline void causal_softmax_any(double* S, int64_t Tn) { causal_softmax_rows(S, Tn); }
inline void softmax_grad_any(float* d, const float* p, int64_t Tn, float s) {
  softmax_grad_f32(d, p, Tn, s);
}
inline void softmax_grad_any(double* d, const double* p, int64_t Tn, double s) {
  softmax_grad_rows(d, p, Tn, s);
}

}  // namespace

template <class T>
void attention_forward(AttentionOperand<T> out, T* att, AttentionOperand<const T> q,
                       AttentionOperand<const T> k, AttentionOperand<const T> v, int64_t B,
                       int64_t NH, int64_t Tn, int64_t HS) {
  const T scale = T(1) / std::sqrt(T(HS));
  parallel_for(B * NH, 2 * Tn * Tn * HS, [&](int64_t p0, int64_t p1, int) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / NH, h = p % NH;
      T* S = att + p * Tn * Tn;
      gemm(false, true, Tn, Tn, HS, scale, q.at(b, h), q.s.t, k.at(b, h), k.s.t, T(0), S, Tn);
      causal_softmax_any(S, Tn);
      gemm(false, false, Tn, HS, Tn, T(1), S, Tn, v.at(b, h), v.s.t, T(0), out.at(b, h), out.s.t);
    }
  });
}

template <class T>
void attention_backward(AttentionOperand<T> dq, AttentionOperand<T> dk, AttentionOperand<T> dv,
                        bool overwrite, AttentionOperand<const T> dout, const T* att,
                        AttentionOperand<const T> q, AttentionOperand<const T> k,
                        AttentionOperand<const T> v, int64_t B, int64_t NH, int64_t Tn,
                        int64_t HS) {
  const T scale = T(1) / std::sqrt(T(HS));
  const T beta = overwrite ? T(0) : T(1);
  parallel_for(B * NH, 4 * Tn * Tn * HS, [&](int64_t p0, int64_t p1, int) {
    std::vector<T> dP(static_cast<size_t>(Tn * Tn));  // per-task scratch
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / NH, h = p % NH;
      const T* P = att + p * Tn * Tn;
      const T* g = dout.at(b, h);
      gemm(false, true, Tn, Tn, HS, T(1), g, dout.s.t, v.at(b, h), v.s.t, T(0), dP.data(), Tn);
      gemm(true, false, Tn, HS, Tn, T(1), P, Tn, g, dout.s.t, beta, dv.at(b, h), dv.s.t);
      softmax_grad_any(dP.data(), P, Tn, scale);
      gemm(false, false, Tn, HS, Tn, T(1), dP.data(), Tn, k.at(b, h), k.s.t, beta, dq.at(b, h),
           dq.s.t);
      gemm(true, false, Tn, HS, Tn, T(1), dP.data(), Tn, q.at(b, h), q.s.t, beta, dk.at(b, h),
           dk.s.t);
    }
  });
}

#define CHORUS_INSTANTIATE(T)                                                                    \
  template void attention_forward<T>(AttentionOperand<T>, T*, AttentionOperand<const T>,         \
                                     AttentionOperand<const T>, AttentionOperand<const T>,       \
                                     int64_t, int64_t, int64_t, int64_t);                        \
  template void attention_backward<T>(                                                           \
      AttentionOperand<T>, AttentionOperand<T>, AttentionOperand<T>, bool,                       \
      AttentionOperand<const T>, const T*, AttentionOperand<const T>, AttentionOperand<const T>, \
      AttentionOperand<const T>, int64_t, int64_t, int64_t, int64_t);
CHORUS_INSTANTIATE(float)
CHORUS_INSTANTIATE(double)
#undef CHORUS_INSTANTIATE

}  // namespace chorus::tensor::cpu
