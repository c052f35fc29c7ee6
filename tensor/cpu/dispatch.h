// Internal: dtype dispatch and element conversions shared by the kernels and ops.
#pragma once

#include <cstdint>
#include <type_traits>

#include "chorus/error.h"
#include "chorus/half.h"
#include "chorus/types.h"

namespace chorus::tensor {

// Widen any element type to the compute type Acc (float or double).
template <class Acc, class T>
inline Acc load_as(const T& v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return static_cast<Acc>(static_cast<float>(v));
  else
    return static_cast<Acc>(v);
}

// Narrow a compute value into any element type (16-bit floats round to nearest even).
template <class T, class Acc>
inline T store_as(Acc v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

// Calls f(T{}) with T the C++ type of a float compute dtype (f32 or f64).
template <class F>
decltype(auto) dispatch_float(DataType t, const char* op, F&& f) {
  switch (t) {
    case DataType::kF32:
      return f(float{});
    case DataType::kF64:
      return f(double{});
    default:
      break;
  }
  throw InvalidArgument(
      detail::concat(op, ": dtype ", to_string(t), " not supported (f32 or f64; cast first)"));
}

// Calls f(T{}) for any float dtype (f32, f64, bf16 or f16).
template <class F>
decltype(auto) dispatch_float_any(DataType t, const char* op, F&& f) {
  switch (t) {
    case DataType::kF32:
      return f(float{});
    case DataType::kF64:
      return f(double{});
    case DataType::kBF16:
      return f(BFloat16{});
    case DataType::kF16:
      return f(Half{});
    default:
      break;
  }
  throw InvalidArgument(detail::concat(op, ": ", to_string(t), " is not a floating-point type"));
}

// Calls f(T{}) for an index dtype (i32 or i64).
template <class F>
decltype(auto) dispatch_index(DataType t, const char* op, F&& f) {
  switch (t) {
    case DataType::kI32:
      return f(int32_t{});
    case DataType::kI64:
      return f(int64_t{});
    default:
      break;
  }
  throw InvalidArgument(
      detail::concat(op, ": index dtype ", to_string(t), " not supported (i32 or i64)"));
}

// Calls f(T{}) for any element type.
template <class F>
decltype(auto) dispatch_any(DataType t, const char* op, F&& f) {
  switch (t) {
    case DataType::kF32:
      return f(float{});
    case DataType::kF64:
      return f(double{});
    case DataType::kF16:
      return f(Half{});
    case DataType::kBF16:
      return f(BFloat16{});
    case DataType::kI8:
      return f(int8_t{});
    case DataType::kU8:
      return f(uint8_t{});
    case DataType::kI32:
      return f(int32_t{});
    case DataType::kI64:
      return f(int64_t{});
    default:
      break;
  }
  throw InvalidArgument(detail::concat(op, ": invalid dtype"));
}

}  // namespace chorus::tensor
