// Strided copies with dtype conversion and fills (kernels.h), converting as cpu/strided.cc does:
// through f32 between f32 and the 16-bit formats, through f64 when either side is f64 (or an
// integer), through int64 between integers; 16-bit results round to nearest even.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace chorus::tensor::cuda {
namespace {

// Element i of the layout (row-major over its shape) -> its offset on each side.
__device__ __forceinline__ void offsets(const Layout& l, int64_t i, int64_t& dst, int64_t& src) {
  dst = 0;
  src = 0;
  for (int d = l.ndim - 1; d >= 0; --d) {
    const int64_t k = i % l.shape[d];
    i /= l.shape[d];
    dst += k * l.dst[d];
    src += k * l.src[d];
  }
}

template <class D, class S>
using AccOf =
    std::conditional_t<std::is_integral_v<D> && std::is_integral_v<S>, int64_t,
                       std::conditional_t<std::is_same_v<D, double> || std::is_same_v<S, double> ||
                                              std::is_integral_v<D> || std::is_integral_v<S>,
                                          double, float>>;

template <class D, class S>
__global__ void copy_kernel(D* dst, const S* src, Layout layout, int64_t n, bool accumulate) {
  using Acc = AccOf<D, S>;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t od, os;
    offsets(layout, i, od, os);
    const Acc v = load_as<Acc>(src[os]);
    dst[od] = accumulate ? store_as<D>(load_as<Acc>(dst[od]) + v) : store_as<D>(v);
  }
}

template <class T>
__global__ void fill_kernel(T* dst, Layout layout, int64_t n, T value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t od, os;
    offsets(layout, i, od, os);
    dst[od] = value;
  }
}

bool is_float_type(DataType t) {
  return t == DataType::kF32 || t == DataType::kF64 || t == DataType::kBF16 || t == DataType::kF16;
}

// Calls f(T{}) with the device type of any dtype.
template <class F>
void dispatch_any(DataType dt, F&& f) {
  switch (dt) {
    case DataType::kF32:
      return f(float{});
    case DataType::kF64:
      return f(double{});
    case DataType::kBF16:
      return f(__nv_bfloat16{});
    case DataType::kF16:
      return f(__half{});
    case DataType::kI8:
      return f(int8_t{});
    case DataType::kU8:
      return f(uint8_t{});
    case DataType::kI32:
      return f(int32_t{});
    case DataType::kI64:
      return f(int64_t{});
    default:
      throw InvalidArgument("CUDA copy: invalid dtype");
  }
}

int64_t numel(const Layout& l) {
  int64_t n = 1;
  for (int d = 0; d < l.ndim; ++d) n *= l.shape[d];
  return n;
}

}  // namespace

bool can_copy(DataType dst, DataType src) {
  return (is_float_type(dst) && is_float_type(src)) || dst == src;
}

void strided_copy(DataType dst_dt, void* dst, DataType src_dt, const void* src,
                  const Layout& layout, bool accumulate, Stream stream) {
  CHORUS_ARG_CHECK(can_copy(dst_dt, src_dt), "CUDA copy: ", to_string(src_dt), " -> ",
                   to_string(dst_dt),
                   " has no kernel (float types convert; integers copy as they are)");
  const int64_t n = numel(layout);
  if (n == 0) return;
  auto launch = [&](auto dtag, auto stag) {
    using D = decltype(dtag);
    using S = decltype(stag);
    copy_kernel<D, S><<<grid_for(n), kThreads, 0, native(stream)>>>(
        static_cast<D*>(dst), static_cast<const S*>(src), layout, n, accumulate);
  };
  if (is_float_type(dst_dt)) {
    dispatch_float_any(dst_dt, "CUDA copy", [&](auto d) {
      dispatch_float_any(src_dt, "CUDA copy", [&](auto s) { launch(d, s); });
    });
  } else {
    dispatch_any(dst_dt, [&](auto d) { launch(d, d); });
  }
  check_launch("strided_copy");
}

void fill(DataType dt, void* dst, const Layout& layout, double value, Stream stream) {
  const int64_t n = numel(layout);
  if (n == 0) return;
  dispatch_any(dt, [&](auto tag) {
    using T = decltype(tag);
    // The value converts on the host as the CPU's fill does (store_as from double).
    T v;
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
      v = __float2bfloat16_rn(static_cast<float>(value));
    else if constexpr (std::is_same_v<T, __half>)
      v = __float2half_rn(static_cast<float>(value));
    else
      v = static_cast<T>(value);
    fill_kernel<T>
        <<<grid_for(n), kThreads, 0, native(stream)>>>(static_cast<T*>(dst), layout, n, v);
  });
  check_launch("fill");
}

}  // namespace chorus::tensor::cuda
