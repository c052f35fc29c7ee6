#include "chorus_bench/value_pattern.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "chorus/error.h"
#include "chorus/half.h"

namespace chorus::bench {
namespace {

// splitmix64's finaliser: neighbouring (rank, index) pairs get unrelated values.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hash(int rank, size_t index) {
  return mix((static_cast<uint64_t>(rank) << 40) ^ static_cast<uint64_t>(index));
}

template <class T>
T* typed(void* buffer) {
  return static_cast<T*>(buffer);
}
template <class T>
const T* typed(const void* buffer) {
  return static_cast<const T*>(buffer);
}

}  // namespace

int64_t value_bound(DataType dtype) {
  switch (dtype) {
    case DataType::kF16:
      return int64_t{1} << 11;
    case DataType::kBF16:
      return int64_t{1} << 8;
    case DataType::kI8:
      return 127;
    case DataType::kU8:
      return 254;
    default:
      return int64_t{1} << 24;
  }
}

ValuePattern::ValuePattern(DataType dtype, std::optional<ReduceOp> op, int world_size)
    : dtype_(dtype), op_(op), world_size_(world_size), bound_(value_bound(dtype)) {
  CHORUS_ARG_CHECK(is_valid(dtype), "ValuePattern: invalid dtype");
  CHORUS_ARG_CHECK(!op || is_valid(*op), "ValuePattern: invalid op");
  CHORUS_ARG_CHECK(world_size >= 1, "ValuePattern: world size must be >= 1, got ", world_size);
  low_ = dtype == DataType::kU8 ? 0 : -bound_;
  sum_max_ = bound_ / world_size;
  prod_twos_ = std::bit_width(static_cast<uint64_t>(bound_)) - 1;  // floor(log2(bound))
  avg_range_ = std::max<int64_t>(0, bound_ / world_size - 1);
}

int64_t ValuePattern::input(int rank, size_t index) const {
  const uint64_t h = hash(rank, index);
  const int n = world_size_;
  switch (op_.value_or(ReduceOp::kMin)) {
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return low_ + static_cast<int64_t>(h % static_cast<uint64_t>(bound_ - low_ + 1));
    case ReduceOp::kSum:
      return static_cast<int64_t>(h % static_cast<uint64_t>(sum_max_ + 1));
    case ReduceOp::kProd: {
      // Index i has min(n, i mod (twos + 1)) ranks holding a two, rotating with i.
      const size_t twos = index % static_cast<size_t>(prod_twos_ + 1);
      const int64_t magnitude = (rank + index) % n < twos ? 2 : 1;
      const bool negative = low_ < 0 && h % 4 == 0;
      return negative ? -magnitude : magnitude;
    }
    case ReduceOp::kAvg: {
      if (avg_range_ == 0) return 0;
      const int64_t c = 1 + static_cast<int64_t>(mix(index) % static_cast<uint64_t>(avg_range_));
      // Position k in the rotated order: pairs (0, 1), (2, 3), ... get +1 and -1; an odd n
      // leaves the last position at 0.
      const size_t k = (static_cast<size_t>(rank) + index) % static_cast<size_t>(n);
      const int64_t e = k % 2 == 1 ? -1 : (k + 1 < static_cast<size_t>(n) ? 1 : 0);
      return c + e;
    }
    default:
      break;
  }
  CHORUS_CHECK(false, "unreachable op");
  return 0;
}

int64_t ValuePattern::reduced(size_t index) const {
  CHORUS_ARG_CHECK(op_.has_value(), "ValuePattern::reduced: the pattern has no op");
  int64_t acc = input(0, index);
  for (int r = 1; r < world_size_; ++r) {
    const int64_t v = input(r, index);
    switch (*op_) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += v;
        break;
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      default:
        break;
    }
  }
  return *op_ == ReduceOp::kAvg ? acc / world_size_ : acc;
}

void store_value(DataType dtype, void* buffer, size_t index, int64_t value) {
  switch (dtype) {
    case DataType::kF32:
      typed<float>(buffer)[index] = static_cast<float>(value);
      return;
    case DataType::kF64:
      typed<double>(buffer)[index] = static_cast<double>(value);
      return;
    case DataType::kF16:
      typed<uint16_t>(buffer)[index] = float_to_half(static_cast<float>(value));
      return;
    case DataType::kBF16:
      typed<uint16_t>(buffer)[index] = float_to_bf16(static_cast<float>(value));
      return;
    case DataType::kI8:
      typed<int8_t>(buffer)[index] = static_cast<int8_t>(value);
      return;
    case DataType::kU8:
      typed<uint8_t>(buffer)[index] = static_cast<uint8_t>(value);
      return;
    case DataType::kI32:
      typed<int32_t>(buffer)[index] = static_cast<int32_t>(value);
      return;
    case DataType::kI64:
      typed<int64_t>(buffer)[index] = value;
      return;
    default:
      break;
  }
  CHORUS_CHECK(false, "invalid dtype");
}

double load_value(DataType dtype, const void* buffer, size_t index) {
  switch (dtype) {
    case DataType::kF32:
      return typed<float>(buffer)[index];
    case DataType::kF64:
      return typed<double>(buffer)[index];
    case DataType::kF16:
      return half_to_float(typed<uint16_t>(buffer)[index]);
    case DataType::kBF16:
      return bf16_to_float(typed<uint16_t>(buffer)[index]);
    case DataType::kI8:
      return typed<int8_t>(buffer)[index];
    case DataType::kU8:
      return typed<uint8_t>(buffer)[index];
    case DataType::kI32:
      return typed<int32_t>(buffer)[index];
    case DataType::kI64:
      return static_cast<double>(typed<int64_t>(buffer)[index]);
    default:
      break;
  }
  CHORUS_CHECK(false, "invalid dtype");
  return 0;
}

void fill_sentinel(DataType dtype, void* buffer, size_t count) {
  const auto fill = [&](auto value) {
    auto* p = typed<decltype(value)>(buffer);
    for (size_t i = 0; i < count; ++i) p[i] = value;
  };
  switch (dtype) {
    case DataType::kF32:
      fill(std::numeric_limits<float>::quiet_NaN());
      return;
    case DataType::kF64:
      fill(std::numeric_limits<double>::quiet_NaN());
      return;
    case DataType::kF16:
      fill(uint16_t{0x7e00});
      return;
    case DataType::kBF16:
      fill(uint16_t{0x7fc0});
      return;
    case DataType::kI8:
      fill(std::numeric_limits<int8_t>::min());
      return;
    case DataType::kU8:
      fill(std::numeric_limits<uint8_t>::max());
      return;
    case DataType::kI32:
      fill(std::numeric_limits<int32_t>::min());
      return;
    case DataType::kI64:
      fill(std::numeric_limits<int64_t>::min());
      return;
    default:
      break;
  }
  CHORUS_CHECK(false, "invalid dtype");
}

}  // namespace chorus::bench
