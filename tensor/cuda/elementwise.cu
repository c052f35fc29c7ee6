// Element-wise kernels of the CUDA backend (kernels.h), each the CPU's formula in the CPU's order
// (cpu/elementwise.cc; dropout: cpu/backend.cc, its mask drawn by runtime/philox.h as the CPU's);
// tanh is the device's tanh where the CPU's f32 path uses its fast one.
#include "cuda/common.cuh"
#include "cuda/kernels.h"
#include "runtime/philox.h"

namespace chorus::tensor::cuda {
namespace {

// Grid-stride loop over [0, n).
#define CHORUS_FOR_EACH(i, n)                                               \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

template <class T>
__global__ void binary_kernel(Binary op, T* out, const T* a, const T* b, int64_t n) {
  CHORUS_FOR_EACH(i, n) {
    const T x = a[i], y = b[i];
    out[i] = op == Binary::kAdd ? x + y : op == Binary::kSub ? x - y : x * y;
  }
}

template <class T>
__global__ void scale_kernel(T* out, const T* a, T s, int64_t n) {
  CHORUS_FOR_EACH(i, n) out[i] = s * a[i];
}

template <class T>
__global__ void axpy_kernel(T* y, T alpha, const T* x, int64_t n) {
  CHORUS_FOR_EACH(i, n) y[i] += alpha * x[i];
}

template <class T>
__global__ void mul_backward_kernel(T* da, T* db, const T* a, const T* b, const T* dy, int64_t n) {
  CHORUS_FOR_EACH(i, n) {
    if (da != nullptr) da[i] += b[i] * dy[i];
    if (db != nullptr) db[i] += a[i] * dy[i];
  }
}

// GELU, tanh approximation (GPT-2), as cpu/elementwise.cc writes it.
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2/pi)

template <class T>
__global__ void gelu_forward_kernel(T* out, const T* in, int64_t n) {
  CHORUS_FOR_EACH(i, n) {
    const T x = in[i];
    const T u = T(kGeluScale) * (x + T(0.044715) * x * x * x);
    out[i] = T(0.5) * x * (T(1) + tanh_of(u));
  }
}

template <class T>
__global__ void gelu_backward_kernel(T* dx, const T* in, const T* dy, int64_t n) {
  CHORUS_FOR_EACH(i, n) {
    const T x = in[i];
    const T u = T(kGeluScale) * (x + T(0.044715) * x * x * x);
    const T th = tanh_of(u);
    const T sech2 = T(1) - th * th;
    const T local = T(0.5) * (T(1) + th) +
                    T(0.5) * x * sech2 * T(kGeluScale) * (T(1) + T(3 * 0.044715) * x * x);
    dx[i] += local * dy[i];
  }
}

template <class T>
__global__ void add_bias_kernel(T* out, const T* x, const T* bias, int64_t n, int64_t C) {
  CHORUS_FOR_EACH(i, n) out[i] = x[i] + bias[i % C];
}

template <class T>
__global__ void add_scalar_kernel(T* dx, const T* dy, double factor, int64_t n) {
  const T v = static_cast<T>(factor * double(dy[0]));
  CHORUS_FOR_EACH(i, n) dx[i] += v;
}

template <class L>
__global__ void round_kernel(float* out, const float* in, int64_t n, bool accumulate) {
  CHORUS_FOR_EACH(i, n) {
    const float r = load_as<float>(store_as<L>(in[i]));
    out[i] = accumulate ? out[i] + r : r;
  }
}

template <class F>
void dispatch_lowp(DataType lowp, const char* what, F&& f) {
  if (lowp == DataType::kBF16)
    f(__nv_bfloat16{});
  else if (lowp == DataType::kF16)
    f(__half{});
  else
    throw InvalidArgument(detail::concat(what, ": ", to_string(lowp), " is not bf16 or f16"));
}

template <class T>
__global__ void dropout_kernel(T* out, const T* x, int64_t n, T scale, float threshold,
                               uint64_t seed, uint64_t stream_id, bool accumulate) {
  CHORUS_FOR_EACH(i, n) {
    const float u = philox::uniform(seed, stream_id, static_cast<uint64_t>(i));
    const T v = u >= threshold ? scale * x[i] : T(0);
    out[i] = accumulate ? out[i] + v : v;
  }
}

}  // namespace

void binary(Binary op, DataType dt, void* out, const void* a, const void* b, int64_t n,
            Stream stream) {
  if (n == 0) return;
  dispatch_float(dt, "binary", [&](auto tag) {
    using T = decltype(tag);
    binary_kernel<T><<<grid_for(n), kThreads, 0, native(stream)>>>(
        op, static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
  });
  check_launch("binary");
}

void scale(DataType dt, void* out, const void* a, double s, int64_t n, Stream stream) {
  if (n == 0) return;
  dispatch_float(dt, "scale", [&](auto tag) {
    using T = decltype(tag);
    scale_kernel<T><<<grid_for(n), kThreads, 0, native(stream)>>>(
        static_cast<T*>(out), static_cast<const T*>(a), T(s), n);
  });
  check_launch("scale");
}

void axpy(DataType dt, void* y, double alpha, const void* x, int64_t n, Stream stream) {
  if (n == 0) return;
  dispatch_float(dt, "axpy", [&](auto tag) {
    using T = decltype(tag);
    axpy_kernel<T><<<grid_for(n), kThreads, 0, native(stream)>>>(static_cast<T*>(y), T(alpha),
                                                                 static_cast<const T*>(x), n);
  });
  check_launch("axpy");
}

void mul_backward(DataType dt, void* da, void* db, const void* a, const void* b, const void* dy,
                  int64_t n, Stream stream) {
  if (n == 0 || (da == nullptr && db == nullptr)) return;
  dispatch_float(dt, "mul_backward", [&](auto tag) {
    using T = decltype(tag);
    mul_backward_kernel<T><<<grid_for(n), kThreads, 0, native(stream)>>>(
        static_cast<T*>(da), static_cast<T*>(db), static_cast<const T*>(a),
        static_cast<const T*>(b), static_cast<const T*>(dy), n);
  });
  check_launch("mul_backward");
}

void gelu_forward(DataType dt, void* out, const void* x, int64_t n, Stream stream) {
  if (n == 0) return;
  dispatch_float(dt, "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    gelu_forward_kernel<T><<<grid_for(n), kThreads, 0, native(stream)>>>(
        static_cast<T*>(out), static_cast<const T*>(x), n);
  });
  check_launch("gelu_forward");
}

void gelu_backward(DataType dt, void* dx, const void* x, const void* dy, int64_t n, Stream stream) {
  if (n == 0) return;
  dispatch_float(dt, "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    gelu_backward_kernel<T><<<grid_for(n), kThreads, 0, native(stream)>>>(
        static_cast<T*>(dx), static_cast<const T*>(x), static_cast<const T*>(dy), n);
  });
  check_launch("gelu_backward");
}

void add_bias(DataType dt, void* out, const void* x, const void* bias, int64_t N, int64_t C,
              Stream stream) {
  const int64_t n = N * C;
  if (n == 0) return;
  dispatch_float(dt, "add_bias", [&](auto tag) {
    using T = decltype(tag);
    add_bias_kernel<T><<<grid_for(n), kThreads, 0, native(stream)>>>(
        static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(bias), n, C);
  });
  check_launch("add_bias");
}

void add_scalar(DataType dt, void* dx, const void* dy, double factor, int64_t n, Stream stream) {
  if (n == 0) return;
  dispatch_float(dt, "add_scalar", [&](auto tag) {
    using T = decltype(tag);
    add_scalar_kernel<T><<<grid_for(n), kThreads, 0, native(stream)>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), factor, n);
  });
  check_launch("add_scalar");
}

void round_to(DataType lowp, float* out, const float* in, int64_t n, bool accumulate,
              Stream stream) {
  if (n == 0) return;
  dispatch_lowp(lowp, "round_to", [&](auto tag) {
    using L = decltype(tag);
    round_kernel<L><<<grid_for(n), kThreads, 0, native(stream)>>>(out, in, n, accumulate);
  });
  check_launch("round_to");
}

void dropout(DataType dt, void* out, const void* x, int64_t n, double p, uint64_t seed,
             uint64_t stream_id, bool accumulate, Stream stream) {
  if (n == 0) return;
  dispatch_float(dt, "dropout", [&](auto tag) {
    using T = decltype(tag);
    dropout_kernel<T><<<grid_for(n), kThreads, 0, native(stream)>>>(
        static_cast<T*>(out), static_cast<const T*>(x), n, T(1.0 / (1.0 - p)),
        static_cast<float>(p), seed, stream_id, accumulate);
  });
  check_launch("dropout");
}

}  // namespace chorus::tensor::cuda
