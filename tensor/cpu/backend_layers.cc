// The CPU backend (cpu/backend.h): GEMMs, attention, layernorm, softmax, cross-entropy, embedding.
#include <cmath>
#include <cstring>

#include "chorus/tensor/gemm.h"
#include "cpu/attention.h"
#include "cpu/autocast_gemm.h"
#include "cpu/backend.h"
#include "cpu/dispatch.h"
#include "cpu/layernorm.h"
#include "cpu/softmax.h"

namespace chorus::tensor {
namespace {

// A (B, NH, T, HS) view as the attention kernels read it (dim 3 contiguous).
template <class T>
cpu::AttentionOperand<T> operand(const Tensor& t) {
  return {static_cast<T*>(t.data_ptr()), {t.stride(0), t.stride(1), t.stride(2)}};
}

}  // namespace

// ---- matrix products ----------------------------------------------------------------------------

void CpuBackend::gemm(const GemmArgs& g) {
  dispatch_float(g.c.dtype(), "gemm", [&](auto tag) {
    using T = decltype(tag);
    const T* a = g.a.data<T>();
    const T* b = g.b.data<T>();
    T* c = g.c.data<T>();
    for (int64_t i = 0; i < g.batch; ++i)
      tensor::gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, T(1), a + i * g.stride_a, g.lda,
                   b + i * g.stride_b, g.ldb, g.accumulate ? T(1) : T(0), c + i * g.stride_c,
                   g.ldc);
  });
}

Tensor CpuBackend::autocast_operand(const Tensor& x, DataType lowp) {
  return cpu::to_lowp(x, lowp);
}

void CpuBackend::gemm_autocast(DataType lowp, const GemmArgs& g) {
  CHORUS_CHECK(g.ldc == g.n, "the CPU's autocast GEMM writes rows of n elements");
  if (g.k == 0) {  // sums of nothing (the 16-bit kernels need k > 0)
    if (!g.accumulate)
      for (int64_t i = 0; i < g.batch; ++i)
        std::memset(g.c.data<float>() + i * g.stride_c, 0,
                    static_cast<size_t>(g.m * g.n) * sizeof(float));
    return;
  }
  const DataType stored = g.a.dtype();
  const size_t esize = dtype_size(stored);
  const auto* a = static_cast<const char*>(g.a.data_ptr());
  const auto* b = static_cast<const char*>(g.b.data_ptr());
  float* c = g.c.data<float>();
  for (int64_t i = 0; i < g.batch; ++i)
    cpu::mm_lowp(lowp, stored, g.trans_a, g.trans_b, g.m, g.n, g.k,
                 a + static_cast<size_t>(i * g.stride_a) * esize, g.lda,
                 b + static_cast<size_t>(i * g.stride_b) * esize, g.ldb, c + i * g.stride_c,
                 g.accumulate);
}

// ---- attention ----------------------------------------------------------------------------------

void CpuBackend::attention_forward(const Tensor& out, const Tensor& att, const Tensor& q,
                                   const Tensor& k, const Tensor& v) {
  const int64_t B = q.size(0), NH = q.size(1), Tn = q.size(2), HS = q.size(3);
  dispatch_float(q.dtype(), "causal_attention", [&](auto tag) {
    using T = decltype(tag);
    cpu::attention_forward(operand<T>(out), att.data<T>(), operand<const T>(q), operand<const T>(k),
                           operand<const T>(v), B, NH, Tn, HS);
  });
}

void CpuBackend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                    bool assign, const Tensor& dy, const Tensor& att,
                                    const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t B = q.size(0), NH = q.size(1), Tn = q.size(2), HS = q.size(3);
  dispatch_float(q.dtype(), "causal_attention backward", [&](auto tag) {
    using T = decltype(tag);
    cpu::attention_backward(operand<T>(dq), operand<T>(dk), operand<T>(dv), assign,
                            operand<const T>(dy), att.data<T>(), operand<const T>(q),
                            operand<const T>(k), operand<const T>(v), B, NH, Tn, HS);
  });
}

// ---- layernorm, softmax -------------------------------------------------------------------------

void CpuBackend::layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   double eps) {
  const int64_t C = weight.numel(), N = mean.numel();
  dispatch_float(x.dtype(), "layernorm", [&](auto tag) {
    using T = decltype(tag);
    cpu::layernorm_forward(out.data<T>(), mean.data<T>(), rstd.data<T>(), x.data<T>(),
                           weight.data<T>(), bias.data<T>(), N, C, eps);
  });
}

void CpuBackend::layernorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                    const Tensor& dy, const Tensor& x, const Tensor& weight,
                                    const Tensor& mean, const Tensor& rstd) {
  const int64_t C = weight.numel(), N = mean.numel();
  dispatch_float(dy.dtype(), "layernorm backward", [&](auto tag) {
    using T = decltype(tag);
    auto ptr = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
    cpu::layernorm_backward(ptr(dx), ptr(dweight), ptr(dbias), dy.data<T>(), x.data<T>(),
                            weight.data<T>(), mean.data<T>(), rstd.data<T>(), N, C);
  });
}

void CpuBackend::softmax_forward(const Tensor& y, const Tensor& x) {
  const int64_t V = x.dim() == 0 ? 1 : x.size(-1), N = x.numel() / std::max<int64_t>(V, 1);
  dispatch_float(x.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    cpu::softmax_forward(y.data<T>(), x.data<T>(), N, V);
  });
}

void CpuBackend::softmax_backward(const Tensor& dx, const Tensor& y, const Tensor& dy) {
  const int64_t V = y.dim() == 0 ? 1 : y.size(-1), N = y.numel() / std::max<int64_t>(V, 1);
  dispatch_float(dy.dtype(), "softmax backward", [&](auto tag) {
    using T = decltype(tag);
    cpu::softmax_backward(dx.data<T>(), y.data<T>(), dy.data<T>(), N, V);
  });
}

// ---- cross-entropy ------------------------------------------------------------------------------

void CpuBackend::row_max(const Tensor& row_max, const Tensor& logits) {
  const int64_t N = logits.size(0), V = logits.size(1);
  dispatch_float(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    cpu::row_max(row_max.data<T>(), logits.data<T>(), N, V);
  });
}

void CpuBackend::exp_sums_and_target(const Tensor& sums, const Tensor& logits,
                                     const Tensor& row_max, const Tensor& targets,
                                     int64_t vocab_start) {
  const int64_t N = logits.size(0), V = logits.size(1);
  dispatch_float(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(targets.dtype(), "cross_entropy", [&](auto itag) {
      using I = decltype(itag);
      cpu::exp_sums_and_target(sums.data<T>(), logits.data<T>(), row_max.data<T>(),
                               targets.data<I>(), vocab_start, N, V);
    });
  });
}

void CpuBackend::cross_entropy_loss(const Tensor& loss, const Tensor& sums, const Tensor& row_max) {
  const int64_t N = row_max.numel();
  dispatch_float(loss.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const T* s = sums.data<T>();
    const T* m = row_max.data<T>();
    double total = 0;
    for (int64_t n = 0; n < N; ++n)
      total += std::log(double(s[2 * n])) + double(m[n]) - double(s[2 * n + 1]);
    *loss.data<T>() = static_cast<T>(total / static_cast<double>(N));
  });
}

void CpuBackend::cross_entropy_backward(const Tensor& dlogits, const Tensor& logits,
                                        const Tensor& row_max, const Tensor& sums,
                                        const Tensor& targets, int64_t vocab_start,
                                        const Tensor& dloss) {
  const int64_t N = logits.size(0), V = logits.size(1);
  dispatch_float(dlogits.dtype(), "cross_entropy backward", [&](auto tag) {
    using T = decltype(tag);
    const T scale = static_cast<T>(double(*dloss.data<T>()) / static_cast<double>(N));
    dispatch_index(targets.dtype(), "cross_entropy backward", [&](auto itag) {
      using I = decltype(itag);
      cpu::cross_entropy_backward(dlogits.data<T>(), logits.data<T>(), row_max.data<T>(),
                                  sums.data<T>(), targets.data<I>(), vocab_start, N, V, scale);
    });
  });
}

// ---- embedding ----------------------------------------------------------------------------------

void CpuBackend::embedding_forward(const Tensor& out, const Tensor& idx, const Tensor& weight) {
  const int64_t V = weight.size(0), N = idx.numel();
  const size_t row_bytes = static_cast<size_t>(weight.size(1)) * dtype_size(weight.dtype());
  dispatch_index(idx.dtype(), "embedding", [&](auto itag) {
    using I = decltype(itag);
    const I* ix = idx.data<I>();
    for (int64_t n = 0; n < N; ++n) {
      const int64_t r = static_cast<int64_t>(ix[n]);
      CHORUS_ARG_CHECK(r >= 0 && r < V, "embedding: index ", r, " outside [0, ", V, ")");
      std::memcpy(static_cast<char*>(out.data_ptr()) + n * row_bytes,
                  static_cast<const char*>(weight.data_ptr()) + r * row_bytes, row_bytes);
    }
  });
}

// dweight[idx[n]] += dy[n] (rows of repeated tokens add up; done serially, it is N * C adds)
void CpuBackend::embedding_backward(const Tensor& dweight, const Tensor& idx, const Tensor& dy) {
  const int64_t N = idx.numel(), C = dweight.size(1);
  dispatch_float(dy.dtype(), "embedding backward", [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(idx.dtype(), "embedding backward", [&](auto itag) {
      using I = decltype(itag);
      const I* ix = idx.data<I>();
      const T* d = dy.data<T>();
      T* dwp = dweight.data<T>();
      for (int64_t n = 0; n < N; ++n) {
        T* row = dwp + static_cast<int64_t>(ix[n]) * C;
        for (int64_t c = 0; c < C; ++c) row[c] += d[n * C + c];
      }
    });
  });
}

}  // namespace chorus::tensor
