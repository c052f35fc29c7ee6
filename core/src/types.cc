#include "chorus/types.h"

#include <string>

namespace chorus {

std::string_view to_string(DataType t) {
  switch (t) {
    case DataType::kF32:
      return "float";
    case DataType::kF64:
      return "double";
    case DataType::kF16:
      return "half";
    case DataType::kBF16:
      return "bfloat16";
    case DataType::kI8:
      return "int8";
    case DataType::kU8:
      return "uint8";
    case DataType::kI32:
      return "int32";
    case DataType::kI64:
      return "int64";
    default:
      return "invalid";
  }
}

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAvg:
      return "avg";
    default:
      return "invalid";
  }
}

std::optional<DataType> parse_dtype(std::string_view name) {
  struct Alias {
    std::string_view name;
    DataType t;
  };
  static constexpr Alias kAliases[] = {
      {"float", DataType::kF32},     {"f32", DataType::kF32},     {"fp32", DataType::kF32},
      {"float32", DataType::kF32},   {"double", DataType::kF64},  {"f64", DataType::kF64},
      {"fp64", DataType::kF64},      {"float64", DataType::kF64}, {"half", DataType::kF16},
      {"f16", DataType::kF16},       {"fp16", DataType::kF16},    {"float16", DataType::kF16},
      {"bfloat16", DataType::kBF16}, {"bf16", DataType::kBF16},   {"int8", DataType::kI8},
      {"i8", DataType::kI8},         {"char", DataType::kI8},     {"uint8", DataType::kU8},
      {"u8", DataType::kU8},         {"int32", DataType::kI32},   {"i32", DataType::kI32},
      {"int", DataType::kI32},       {"int64", DataType::kI64},   {"i64", DataType::kI64},
  };
  for (const auto& a : kAliases)
    if (a.name == name) return a.t;
  return std::nullopt;
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  for (ReduceOp op : kAllReduceOps)
    if (to_string(op) == name) return op;
  return std::nullopt;
}

}  // namespace chorus
