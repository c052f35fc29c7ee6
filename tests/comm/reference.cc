#include "reference.h"

#include <cstring>

#include "chorus/half.h"

namespace chorus::testing {
namespace {

bool is_unsigned(DataType t) { return t == DataType::kU8; }

// Wraps an int64 into the integer type's range the way two's complement storage does.
int64_t wrap(DataType t, int64_t v) {
  switch (t) {
    case DataType::kI8:
      return static_cast<int8_t>(static_cast<uint8_t>(v));
    case DataType::kU8:
      return static_cast<uint8_t>(v);
    case DataType::kI32:
      return static_cast<int32_t>(static_cast<uint32_t>(v));
    default:
      return v;
  }
}

}  // namespace

int64_t input_value(DataType dtype, ReduceOp op, int rank, size_t index, int salt) {
  const int64_t i = static_cast<int64_t>(index % 1000003), r = rank, s = salt;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return is_unsigned(dtype) ? (r * 7 + i * 3 + s) % 5 : (r * 7 + i * 3 + s) % 5 - 2;
    case ReduceOp::kProd: {
      const int64_t m = (r * 5 + i + s) % 7;
      if (m == 0) return 2;
      if (m == 3 && !is_unsigned(dtype)) return -1;
      return 1;
    }
    default:
      return is_unsigned(dtype) ? (r * 131 + i * 17 + s) % 97 : (r * 131 + i * 17 + s) % 97 - 48;
  }
}

void store(DataType dtype, void* buf, size_t i, int64_t v) {
  store_double(dtype, buf, i, static_cast<double>(v));
}

void store_double(DataType dtype, void* buf, size_t i, double v) {
  switch (dtype) {
    case DataType::kF32:
      static_cast<float*>(buf)[i] = static_cast<float>(v);
      break;
    case DataType::kF64:
      static_cast<double*>(buf)[i] = v;
      break;
    case DataType::kF16:
      static_cast<uint16_t*>(buf)[i] = float_to_half(static_cast<float>(v));
      break;
    case DataType::kBF16:
      static_cast<uint16_t*>(buf)[i] = float_to_bf16(static_cast<float>(v));
      break;
    case DataType::kI8:
      static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v);
      break;
    case DataType::kU8:
      static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v);
      break;
    case DataType::kI32:
      static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kI64:
      static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v);
      break;
    default:
      break;
  }
}

double load(DataType dtype, const void* buf, size_t i) {
  switch (dtype) {
    case DataType::kF32:
      return static_cast<const float*>(buf)[i];
    case DataType::kF64:
      return static_cast<const double*>(buf)[i];
    case DataType::kF16:
      return half_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBF16:
      return bf16_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kI8:
      return static_cast<const int8_t*>(buf)[i];
    case DataType::kU8:
      return static_cast<const uint8_t*>(buf)[i];
    case DataType::kI32:
      return static_cast<const int32_t*>(buf)[i];
    case DataType::kI64:
      return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    default:
      return 0;
  }
}

void fill_inputs(DataType dtype, ReduceOp op, int rank, void* buf, size_t count, size_t offset,
                 int salt) {
  for (size_t i = 0; i < count; ++i)
    store(dtype, buf, i, input_value(dtype, op, rank, offset + i, salt));
}

double expected_reduction(DataType dtype, ReduceOp op, int n, size_t index, int salt) {
  int64_t acc = input_value(dtype, op, 0, index, salt);
  for (int r = 1; r < n; ++r) {
    const int64_t v = input_value(dtype, op, r, index, salt);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += v;
        break;
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = v < acc ? v : acc;
        break;
      case ReduceOp::kMax:
        acc = v > acc ? v : acc;
        break;
      default:
        break;
    }
  }
  if (op != ReduceOp::kAvg) {
    if (is_floating(dtype)) return static_cast<double>(acc);
    return static_cast<double>(wrap(dtype, acc));
  }
  switch (dtype) {
    case DataType::kF32:
      return static_cast<float>(acc) / static_cast<float>(n);
    case DataType::kF64:
      return static_cast<double>(acc) / n;
    case DataType::kF16:
      return half_to_float(float_to_half(static_cast<float>(acc) / static_cast<float>(n)));
    case DataType::kBF16:
      return bf16_to_float(float_to_bf16(static_cast<float>(acc) / static_cast<float>(n)));
    default:
      return static_cast<double>(wrap(dtype, acc) / n);
  }
}

GuardedBuffer::GuardedBuffer(size_t bytes)
    : storage_(bytes + 2 * kGuard, std::byte{0xA5}), bytes_(bytes) {}

bool GuardedBuffer::guards_intact() const {
  for (size_t i = 0; i < kGuard; ++i)
    if (storage_[i] != std::byte{0xA5} || storage_[kGuard + bytes_ + i] != std::byte{0xA5})
      return false;
  return true;
}

}  // namespace chorus::testing
