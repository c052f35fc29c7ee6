// The CPU backend (cpu/backend.h): a mixture of experts' routing kernels, row scaling and the
// log-sum-exp of the router's logits. Serial loops in a fixed order: the same bits at any thread
// count (they touch N * C and N * E elements, small beside the experts' GEMMs).
#include <cmath>

#include "cpu/backend.h"
#include "cpu/dispatch.h"

namespace chorus::tensor {

void CpuBackend::scale_rows(const Tensor& out, const Tensor& x, const Tensor& s) {
  const int64_t M = s.numel(), C = M == 0 ? 0 : x.numel() / M;
  dispatch_float(x.dtype(), "scale_rows", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* sp = s.data<T>();
    T* op = out.data<T>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t c = 0; c < C; ++c) op[m * C + c] = xp[m * C + c] * sp[m];
  });
}

void CpuBackend::scale_rows_backward(const Tensor& dx, const Tensor& ds, const Tensor& x,
                                     const Tensor& s, const Tensor& dy) {
  const int64_t M = s.numel(), C = M == 0 ? 0 : x.numel() / M;
  dispatch_float(dy.dtype(), "scale_rows backward", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* sp = s.data<T>();
    const T* d = dy.data<T>();
    if (dx.defined()) {
      T* dxp = dx.data<T>();
      for (int64_t m = 0; m < M; ++m)
        for (int64_t c = 0; c < C; ++c) dxp[m * C + c] += d[m * C + c] * sp[m];
    }
    if (ds.defined()) {
      T* dsp = ds.data<T>();
      for (int64_t m = 0; m < M; ++m) {
        double acc = 0;
        for (int64_t c = 0; c < C; ++c)
          acc += static_cast<double>(d[m * C + c]) * static_cast<double>(xp[m * C + c]);
        dsp[m] += static_cast<T>(acc);
      }
    }
  });
}

void CpuBackend::logsumexp_forward(const Tensor& out, const Tensor& x) {
  const int64_t N = out.numel(), V = N == 0 ? 0 : x.numel() / N;
  dispatch_float(x.dtype(), "logsumexp", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* op = out.data<T>();
    for (int64_t n = 0; n < N; ++n) {
      double mx = -INFINITY;
      for (int64_t v = 0; v < V; ++v) mx = std::fmax(mx, static_cast<double>(xp[n * V + v]));
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(xp[n * V + v]) - mx);
      op[n] = static_cast<T>(mx + std::log(sum));
    }
  });
}

void CpuBackend::logsumexp_backward(const Tensor& dx, const Tensor& x, const Tensor& out,
                                    const Tensor& dy) {
  const int64_t N = out.numel(), V = N == 0 ? 0 : x.numel() / N;
  dispatch_float(x.dtype(), "logsumexp backward", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* op = out.data<T>();
    const T* d = dy.data<T>();
    T* dxp = dx.data<T>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t v = 0; v < V; ++v)
        dxp[n * V + v] += static_cast<T>(
            std::exp(static_cast<double>(xp[n * V + v]) - static_cast<double>(op[n])) *
            static_cast<double>(d[n]));
  });
}

}  // namespace chorus::tensor
