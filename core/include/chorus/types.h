// chorus — element types and reduction operators shared by every layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace chorus {

// The element types every collective and kernel accepts. Values are stable (they travel in
// fingerprints and JSON output); kCount is not a type.
enum class DataType : uint8_t {
  kF32 = 0,
  kF64,
  kF16,
  kBF16,
  kI8,
  kU8,
  kI32,
  kI64,
  kCount,
};

// Reduction operators. kAvg is a sum followed by a division by the number of contributors
// (integer types divide with truncation toward zero, like C++).
enum class ReduceOp : uint8_t {
  kSum = 0,
  kProd,
  kMin,
  kMax,
  kAvg,
  kCount,
};

inline constexpr DataType kAllDataTypes[] = {DataType::kF32,  DataType::kF64, DataType::kF16,
                                             DataType::kBF16, DataType::kI8,  DataType::kU8,
                                             DataType::kI32,  DataType::kI64};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                             ReduceOp::kMax, ReduceOp::kAvg};

// Bytes per element; 0 for an invalid value (callers validate with is_valid first).
constexpr size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kF32:
      return 4;
    case DataType::kF64:
      return 8;
    case DataType::kF16:
      return 2;
    case DataType::kBF16:
      return 2;
    case DataType::kI8:
      return 1;
    case DataType::kU8:
      return 1;
    case DataType::kI32:
      return 4;
    case DataType::kI64:
      return 8;
    default:
      return 0;
  }
}

constexpr bool is_valid(DataType t) {
  return static_cast<uint8_t>(t) < static_cast<uint8_t>(DataType::kCount);
}
constexpr bool is_valid(ReduceOp op) {
  return static_cast<uint8_t>(op) < static_cast<uint8_t>(ReduceOp::kCount);
}
constexpr bool is_floating(DataType t) {
  return t == DataType::kF32 || t == DataType::kF64 || t == DataType::kF16 || t == DataType::kBF16;
}

// Short names as nccl-tests prints them: "float", "double", "half", "bfloat16", "int8", "uint8",
// "int32", "int64"; and "sum", "prod", "min", "max", "avg".
std::string_view to_string(DataType t);
std::string_view to_string(ReduceOp op);
// Accepts the names above plus the short aliases f32 f64 f16 bf16 i8 u8 i32 i64 (and fp32 ...).
std::optional<DataType> parse_dtype(std::string_view name);
std::optional<ReduceOp> parse_reduce_op(std::string_view name);

// Maps a C++ element type to its DataType (for the typed-span overloads).
template <class T>
struct DataTypeOf;
template <>
struct DataTypeOf<float> {
  static constexpr DataType value = DataType::kF32;
};
template <>
struct DataTypeOf<double> {
  static constexpr DataType value = DataType::kF64;
};
template <>
struct DataTypeOf<int8_t> {
  static constexpr DataType value = DataType::kI8;
};
template <>
struct DataTypeOf<uint8_t> {
  static constexpr DataType value = DataType::kU8;
};
template <>
struct DataTypeOf<int32_t> {
  static constexpr DataType value = DataType::kI32;
};
template <>
struct DataTypeOf<int64_t> {
  static constexpr DataType value = DataType::kI64;
};
template <class T>
inline constexpr DataType kDataTypeOf = DataTypeOf<T>::value;

}  // namespace chorus
