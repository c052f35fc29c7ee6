// Internal (CUDA sources of the tensor backend): element types, conversions that round as the
// CPU does (cpu/dispatch.h: load_as / store_as), reductions within a warp and a block, launch
// shapes, and the launch check. Device code is built with --fmad=false and IEEE division and
// square root, so an element-wise formula written in the CPU's order rounds as the CPU's does.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "chorus/error.h"
#include "chorus/gpu/runtime.h"
#include "chorus/types.h"

namespace chorus::tensor::cuda {

constexpr int kThreads = 256;  // threads per block of the element-wise and row kernels
constexpr int kWarp = 32;

inline cudaStream_t native(void* stream) { return static_cast<cudaStream_t>(stream); }

// Blocks for n elements at kThreads per block, grid-stride loops covering the rest.
inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

// Throws gpu::GpuError when the launch just made (or an earlier asynchronous one) failed.
inline void check_launch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return;
  throw gpu::GpuError(ErrorKind::kSystem,
                      detail::concat(kernel, ": ", cudaGetErrorName(err), " (", int(err),
                                     "): ", cudaGetErrorString(err)),
                      static_cast<int>(err));
}

// ---- conversions --------------------------------------------------------------------------------

template <class Acc, class T>
__device__ __forceinline__ Acc load_as(T v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return static_cast<Acc>(__bfloat162float(v));
  else if constexpr (std::is_same_v<T, __half>)
    return static_cast<Acc>(__half2float(v));
  else
    return static_cast<Acc>(v);
}

// 16-bit results round to nearest even from f32 (a wider value goes through f32 first, as on the
// CPU: T(static_cast<float>(v))).
template <class T, class Acc>
__device__ __forceinline__ T store_as(Acc v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

// ---- math in T's precision --------------------------------------------------------------------

template <class T>
__device__ __forceinline__ T exp_of(T x) {
  if constexpr (std::is_same_v<T, float>)
    return expf(x);
  else
    return ::exp(x);
}
template <class T>
__device__ __forceinline__ T log_of(T x) {
  if constexpr (std::is_same_v<T, float>)
    return logf(x);
  else
    return ::log(x);
}
template <class T>
__device__ __forceinline__ T sqrt_of(T x) {
  if constexpr (std::is_same_v<T, float>)
    return sqrtf(x);
  else
    return ::sqrt(x);
}
template <class T>
__device__ __forceinline__ T tanh_of(T x) {
  if constexpr (std::is_same_v<T, float>)
    return tanhf(x);
  else
    return ::tanh(x);
}

// ---- reductions ---------------------------------------------------------------------------------

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class T>
__device__ __forceinline__ T warp_max(T v) {
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const T other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  return v;
}

// The sum (or max) of v over the block, returned to every thread; `scratch` holds kWarp values
// and may be reused after the call. blockDim.x is a multiple of kWarp. The order of the sum is
// fixed by the block shape: the same inputs give the same bits.
template <class T, bool kMax = false>
__device__ __forceinline__ T block_reduce(T v, T* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = T(0);
  if (warp == 0) {
    r = lane < warps ? scratch[lane] : (kMax ? scratch[0] : T(0));
    r = kMax ? warp_max(r) : warp_sum(r);
  }
  __syncthreads();  // warp 0 has read every partial
  if (threadIdx.x == 0) scratch[0] = r;
  __syncthreads();
  return scratch[0];
}

// ---- dtype dispatch on the host
// -------------------------------------------------------------------

// Calls f(T{}) for f32 or f64; anything else is refused naming `what`.
template <class F>
void dispatch_float(DataType dt, const char* what, F&& f) {
  switch (dt) {
    case DataType::kF32:
      f(float{});
      return;
    case DataType::kF64:
      f(double{});
      return;
    default:
      throw InvalidArgument(
          detail::concat(what, ": dtype ", to_string(dt), " has no CUDA kernel (f32 or f64)"));
  }
}

// Calls f(T{}) for any float dtype: f32, f64, bf16 (__nv_bfloat16) or f16 (__half).
template <class F>
void dispatch_float_any(DataType dt, const char* what, F&& f) {
  switch (dt) {
    case DataType::kF32:
      f(float{});
      return;
    case DataType::kF64:
      f(double{});
      return;
    case DataType::kBF16:
      f(__nv_bfloat16{});
      return;
    case DataType::kF16:
      f(__half{});
      return;
    default:
      throw InvalidArgument(
          detail::concat(what, ": ", to_string(dt), " is not a floating-point type"));
  }
}

template <class F>
void dispatch_index(DataType dt, const char* what, F&& f) {
  switch (dt) {
    case DataType::kI32:
      f(int32_t{});
      return;
    case DataType::kI64:
      f(int64_t{});
      return;
    default:
      throw InvalidArgument(
          detail::concat(what, ": index dtype ", to_string(dt), " not supported (i32 or i64)"));
  }
}

}  // namespace chorus::tensor::cuda
