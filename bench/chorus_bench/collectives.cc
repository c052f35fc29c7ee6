#include "chorus_bench/collectives.h"

#include <array>

namespace chorus::bench {
namespace {

struct CollectiveInfo {
  std::string_view name;
  bool reduces;
  bool has_root;
  bool size_is_total;
  bool in_place;
};

constexpr std::array<CollectiveInfo, std::size(kAllBenchCollectives)> kInfo{{
    {"all_reduce", true, false, false, true},
    {"reduce_scatter", true, false, true, true},
    {"all_gather", false, false, true, true},
    {"broadcast", false, true, false, true},
    {"reduce", true, true, false, true},
    {"gather", false, true, true, true},
    {"scatter", false, true, true, true},
    {"all_to_all", false, false, true, false},
    {"sendrecv", false, false, false, false},
}};

const CollectiveInfo& info(BenchCollective c) { return kInfo[static_cast<size_t>(c)]; }

}  // namespace

std::string_view to_string(BenchCollective c) { return info(c).name; }

std::optional<BenchCollective> parse_collective(std::string_view name) {
  for (BenchCollective c : kAllBenchCollectives)
    if (info(c).name == name) return c;
  return std::nullopt;
}

bool reduces(BenchCollective c) { return info(c).reduces; }
bool has_root(BenchCollective c) { return info(c).has_root; }
bool size_is_total(BenchCollective c) { return info(c).size_is_total; }
bool supports_in_place(BenchCollective c) { return info(c).in_place; }

double bus_factor(BenchCollective c, int world_size) {
  const double n = world_size;
  if (c == BenchCollective::kAllReduce) return 2.0 * (n - 1) / n;
  if (size_is_total(c)) return (n - 1) / n;
  return 1.0;
}

size_t size_unit(BenchCollective c, DataType dtype, int world_size) {
  const size_t element = dtype_size(dtype);
  return size_is_total(c) ? element * static_cast<size_t>(world_size) : element;
}

size_t call_count(BenchCollective c, size_t bytes, DataType dtype, int world_size) {
  const size_t elements = bytes / dtype_size(dtype);
  return size_is_total(c) ? elements / static_cast<size_t>(world_size) : elements;
}

std::vector<size_t> size_list(BenchCollective c, const SizeRange& range, DataType dtype,
                              int world_size) {
  const size_t unit = size_unit(c, dtype, world_size);
  std::vector<size_t> sizes;
  if (unit > range.max_bytes) return sizes;
  const auto add = [&](size_t bytes) {
    size_t rounded = bytes / unit * unit;
    if (rounded == 0) rounded = unit;
    if (sizes.empty() || sizes.back() != rounded) sizes.push_back(rounded);
  };
  if (range.step_bytes > 0) {
    for (size_t bytes = range.min_bytes; bytes <= range.max_bytes;) {
      add(bytes);
      if (range.max_bytes - bytes < range.step_bytes) break;
      bytes += range.step_bytes;
    }
  } else {
    // A 0-byte start would never grow; it rounds up to the unit anyway.
    for (size_t bytes = range.min_bytes > 0 ? range.min_bytes : 1; bytes <= range.max_bytes;) {
      add(bytes);
      if (range.factor < 2 || bytes > range.max_bytes / range.factor) break;
      bytes *= range.factor;
    }
  }
  return sizes;
}

}  // namespace chorus::bench
