// The CPU backend (cpu/backend.h): memory, copies, element-wise kernels, reductions, optimizers.
#include "cpu/backend.h"

#include <cstring>

#include "cpu/adamw.h"
#include "cpu/dispatch.h"
#include "cpu/elementwise.h"
#include "cpu/simd.h"
#include "cpu/square_units.h"
#include "cpu/strided.h"
#include "runtime/block_cache.h"

namespace chorus::tensor {
namespace {

constexpr size_t kAlignment = 64;  // a cache line; a full AVX-512 vector

// A multiple of the alignment (what aligned_alloc wants), never 0 bytes: a storage's data is
// never null while it holds bytes.
size_t rounded_bytes(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  return rounded == 0 ? kAlignment : rounded;
}

// out[i] (+)= keep(i) ? scale * in[i] : 0 over i in [0, n).
template <class T>
void apply_mask(T* out, const T* in, int64_t n, double p, RngKey key, bool accumulate) {
  const T s = T(1.0 / (1.0 - p));
  const float threshold = static_cast<float>(p);
  parallel_for(n, 32, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const T v = uniform_at(key, static_cast<uint64_t>(i)) >= threshold ? s * in[i] : T(0);
      out[i] = accumulate ? out[i] + v : v;
    }
  });
}

}  // namespace

Backend& cpu_backend() {
  static CpuBackend* backend = new CpuBackend();  // never destroyed: storages outlive statics
  return *backend;
}

// ---- memory -------------------------------------------------------------------------------------

void* CpuBackend::allocate(size_t bytes) {
  void* p = detail::cache_take(rounded_bytes(bytes));
  if (poison_allocations()) std::memset(p, 0xFF, bytes);
  const auto n = static_cast<int64_t>(bytes);
  const int64_t now = current_bytes_.fetch_add(n, std::memory_order_relaxed) + n;
  int64_t peak = peak_bytes_.load(std::memory_order_relaxed);
  while (now > peak && !peak_bytes_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return p;
}

void CpuBackend::deallocate(void* p, size_t bytes) noexcept {
  detail::cache_give(p, rounded_bytes(bytes));
  current_bytes_.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
}

MemoryStats CpuBackend::memory_stats() {
  return {current_bytes_.load(std::memory_order_relaxed),
          peak_bytes_.load(std::memory_order_relaxed), detail::cache_bytes()};
}

void CpuBackend::empty_cache() { detail::cache_empty(); }

void CpuBackend::reset_peak_memory() {
  peak_bytes_.store(current_bytes_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

// ---- copies and fills ---------------------------------------------------------------------------

void CpuBackend::copy(const Tensor& dst, const Tensor& src, bool accumulate) {
  strided_copy(dst, src, accumulate);
}

void CpuBackend::fill(const Tensor& t, double value) {
  dispatch_any(t.dtype(), "fill_", [&](auto tag) {
    using T = decltype(tag);
    const T v = store_as<T>(value);
    T* p = static_cast<T*>(t.data_ptr());
    for_each_row2(t.shape(), t.strides(), t.strides(),
                  [&](int64_t o, int64_t, int64_t n, int64_t s, int64_t) {
                    for (int64_t i = 0; i < n; ++i) p[o + i * s] = v;
                  });
  });
}

void CpuBackend::zero(const Tensor& t) { std::memset(t.data_ptr(), 0, t.nbytes()); }

// ---- element-wise -------------------------------------------------------------------------------

void CpuBackend::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_float(a.dtype(), "add", [&](auto tag) {
    using T = decltype(tag);
    cpu::add_forward(out.data<T>(), a.data<T>(), b.data<T>(), a.numel());
  });
}

void CpuBackend::sub(const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_float(a.dtype(), "sub", [&](auto tag) {
    using T = decltype(tag);
    cpu::sub_forward(out.data<T>(), a.data<T>(), b.data<T>(), a.numel());
  });
}

void CpuBackend::mul(const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_float(a.dtype(), "mul", [&](auto tag) {
    using T = decltype(tag);
    cpu::mul_forward(out.data<T>(), a.data<T>(), b.data<T>(), a.numel());
  });
}

void CpuBackend::mul_backward(const Tensor& da, const Tensor& db, const Tensor& a, const Tensor& b,
                              const Tensor& dy) {
  dispatch_float(dy.dtype(), "mul backward", [&](auto tag) {
    using T = decltype(tag);
    cpu::mul_backward(da.defined() ? da.data<T>() : nullptr, db.defined() ? db.data<T>() : nullptr,
                      a.data<T>(), b.data<T>(), dy.data<T>(), dy.numel());
  });
}

void CpuBackend::scale(const Tensor& out, const Tensor& a, double s) {
  dispatch_float(a.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    cpu::scale_forward(out.data<T>(), a.data<T>(), T(s), a.numel());
  });
}

void CpuBackend::axpy(const Tensor& y, double alpha, const Tensor& x) {
  dispatch_float(y.dtype(), "axpy", [&](auto tag) {
    using T = decltype(tag);
    cpu::axpy(y.data<T>(), T(alpha), x.data<T>(), x.numel());
  });
}

void CpuBackend::gelu_forward(const Tensor& out, const Tensor& x) {
  dispatch_float(x.dtype(), "gelu", [&](auto tag) {
    using T = decltype(tag);
    cpu::gelu_forward(out.data<T>(), x.data<T>(), x.numel());
  });
}

void CpuBackend::gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dy) {
  dispatch_float(x.dtype(), "gelu backward", [&](auto tag) {
    using T = decltype(tag);
    cpu::gelu_backward(dx.data<T>(), x.data<T>(), dy.data<T>(), x.numel());
  });
}

void CpuBackend::add_bias(const Tensor& out, const Tensor& x, const Tensor& bias) {
  const int64_t C = bias.numel(), N = C == 0 ? 0 : x.numel() / C;
  dispatch_float(x.dtype(), "add_bias", [&](auto tag) {
    using T = decltype(tag);
    if (out.data_ptr() != x.data_ptr()) std::memcpy(out.data<T>(), x.data<T>(), x.nbytes());
    cpu::add_bias_rows(out.data<T>(), bias.data<T>(), N, C);
  });
}

void CpuBackend::sum_rows(const Tensor& dbias, const Tensor& dy, bool assign) {
  const int64_t C = dbias.numel(), N = C == 0 ? 0 : dy.numel() / C;
  dispatch_float(dy.dtype(), "bias backward", [&](auto tag) {
    using T = decltype(tag);
    cpu::sum_rows(dbias.data<T>(), dy.data<T>(), N, C, assign);
  });
}

void CpuBackend::dropout(const Tensor& out, const Tensor& x, double p, RngKey key,
                         bool accumulate) {
  dispatch_float(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    apply_mask(out.data<T>(), x.data<T>(), x.numel(), p, key, accumulate);
  });
}

// ---- reductions ---------------------------------------------------------------------------------

void CpuBackend::sum(const Tensor& out, const Tensor& x, double factor) {
  dispatch_float(x.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    *out.data<T>() = static_cast<T>(cpu::sum(x.data<T>(), x.numel()) * factor);
  });
}

void CpuBackend::add_scalar(const Tensor& dx, const Tensor& dy, double factor) {
  dispatch_float(dx.dtype(), "sum backward", [&](auto tag) {
    using T = decltype(tag);
    const T v = static_cast<T>(factor * double(*dy.data<T>()));
    T* d = dx.data<T>();
    for (int64_t i = 0, n = dx.numel(); i < n; ++i) d[i] += v;
  });
}

double CpuBackend::sum_squares(std::span<const Tensor> tensors) {
  double sq = 0;
  for (const Tensor& t : tensors)
    sq += dispatch_float(t.dtype(), "sum_squares", [&](auto tag) {
      using T = decltype(tag);
      return cpu::sum_squares(t.data<T>(), t.numel());
    });
  return sq;
}

float CpuBackend::max_abs(const Tensor& x) {
  return dispatch_float_any(x.dtype(), "gradient norm", [&](auto tag) {
    using T = decltype(tag);
    return cpu::max_abs(x.data<T>(), x.numel());
  });
}

optim::U128 CpuBackend::square_units(const Tensor& x, int scale_exponent) {
  return dispatch_float_any(x.dtype(), "gradient norm", [&](auto tag) {
    using T = decltype(tag);
    return cpu::square_units(x.data<T>(), x.numel(), scale_exponent);
  });
}

// ---- optimizers ---------------------------------------------------------------------------------

void CpuBackend::adamw(std::span<const AdamWTensors> params, const AdamWHyper& h) {
  for (const AdamWTensors& p : params)
    dispatch_float(p.param.dtype(), "adamw", [&](auto tag) {
      using T = decltype(tag);
      cpu::adamw_update(p.param.data<T>(), p.grad.data<T>(), p.m.data<T>(), p.v.data<T>(),
                        p.param.numel(), h.lr, h.beta1, h.beta2, h.beta1_correction,
                        h.beta2_correction, h.eps, p.weight_decay);
    });
}

void CpuBackend::sgd(const Tensor& param, const Tensor& grad, const Tensor& buf, double lr,
                     double momentum, double weight_decay) {
  dispatch_float(param.dtype(), "sgd", [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = param.numel();
    T* pp = param.data<T>();
    Tensor d = grad;
    if (weight_decay != 0) {
      d = Tensor::empty(grad.shape(), grad.dtype());
      std::memcpy(d.data<T>(), grad.data<T>(), grad.nbytes());
      cpu::axpy(d.data<T>(), T(weight_decay), pp, n);
    }
    if (buf.defined()) {
      T* b = buf.data<T>();
      const T* dp = d.data<T>();
      const T mu = T(momentum);
      for (int64_t j = 0; j < n; ++j) b[j] = mu * b[j] + dp[j];
      cpu::axpy(pp, T(-lr), b, n);
    } else {
      cpu::axpy(pp, T(-lr), d.data<T>(), n);
    }
  });
}

}  // namespace chorus::tensor
