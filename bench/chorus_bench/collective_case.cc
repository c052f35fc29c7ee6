#include "chorus_bench/collective_case.h"

#include <algorithm>

#include "chorus/error.h"

namespace chorus::bench {
namespace {

void* at(void* buffer, size_t elements, DataType dtype) {
  return static_cast<std::byte*>(buffer) + elements * dtype_size(dtype);
}
const void* at(const void* buffer, size_t elements, DataType dtype) {
  return static_cast<const std::byte*>(buffer) + elements * dtype_size(dtype);
}

}  // namespace

std::string_view to_string(Placement p) {
  return p == Placement::kInPlace ? "in-place" : "out-of-place";
}

CollectiveCase::CollectiveCase(const CaseParams& params)
    : params_(params),
      pattern_(params.dtype,
               reduces(params.collective) ? std::optional<ReduceOp>(params.op) : std::nullopt,
               params.world_size) {
  CHORUS_ARG_CHECK(params.rank >= 0 && params.rank < params.world_size, "rank ", params.rank,
                   " is not in [0, ", params.world_size, ")");
  CHORUS_ARG_CHECK(
      !has_root(params.collective) || (params.root >= 0 && params.root < params.world_size),
      "root ", params.root, " is not in [0, ", params.world_size, ")");
  CHORUS_ARG_CHECK(!in_place() || supports_in_place(params.collective),
                   to_string(params.collective), " has no in-place form");
}

size_t CollectiveCase::send_extent() const {
  const size_t c = params_.count;
  switch (params_.collective) {
    case BenchCollective::kReduceScatter:
    case BenchCollective::kScatter:
    case BenchCollective::kAllToAll:
      return c * params_.world_size;
    default:
      return c;
  }
}

size_t CollectiveCase::recv_extent() const {
  const size_t c = params_.count;
  switch (params_.collective) {
    case BenchCollective::kAllGather:
    case BenchCollective::kGather:
    case BenchCollective::kAllToAll:
      return c * params_.world_size;
    default:
      return c;
  }
}

size_t CollectiveCase::recv_elements() const {
  // In place the one buffer must hold the larger side (n c for the total-size collectives).
  return in_place() ? std::max(send_extent(), recv_extent()) : recv_extent();
}

size_t CollectiveCase::send_offset() const {
  if (!in_place()) return 0;
  switch (params_.collective) {
    case BenchCollective::kAllGather:
    case BenchCollective::kGather:
      return params_.rank * params_.count;
    default:
      return 0;
  }
}

size_t CollectiveCase::recv_offset() const {
  if (!in_place()) return 0;
  switch (params_.collective) {
    case BenchCollective::kReduceScatter:
    case BenchCollective::kScatter:
      return params_.rank * params_.count;
    default:
      return 0;
  }
}

bool CollectiveCase::contributes() const {
  switch (params_.collective) {
    case BenchCollective::kBroadcast:
    case BenchCollective::kScatter:
      return params_.rank == params_.root;
    default:
      return true;
  }
}

void CollectiveCase::fill(void* send, void* recv) const {
  const DataType dtype = params_.dtype;
  fill_sentinel(dtype, recv, recv_elements());
  void* base = in_place() ? at(recv, send_offset(), dtype) : send;
  if (!in_place()) fill_sentinel(dtype, send, send_elements());
  if (!contributes()) return;
  for (size_t i = 0; i < send_extent(); ++i)
    store_value(dtype, base, i, pattern_.input(params_.rank, i));
}

int64_t CollectiveCase::expected(size_t i) const {
  const size_t c = params_.count;
  const int n = params_.world_size;
  const int rank = params_.rank;
  switch (params_.collective) {
    case BenchCollective::kAllReduce:
    case BenchCollective::kReduce:
      return pattern_.reduced(i);
    case BenchCollective::kReduceScatter:
      return pattern_.reduced(rank * c + i);
    case BenchCollective::kAllGather:
    case BenchCollective::kGather:
      return pattern_.input(static_cast<int>(i / c), i % c);
    case BenchCollective::kBroadcast:
      return pattern_.input(params_.root, i);
    case BenchCollective::kScatter:
      return pattern_.input(params_.root, rank * c + i);
    // Block j of the output is block `rank` of rank j's input.
    case BenchCollective::kAllToAll:
      return pattern_.input(static_cast<int>(i / c), rank * c + i % c);
    case BenchCollective::kSendRecv:
      return pattern_.input((rank + n - 1) % n, i);
  }
  CHORUS_CHECK(false, "unreachable collective");
  return 0;
}

size_t CollectiveCase::count_wrong(const void* recv) const {
  const bool rooted_output = params_.collective == BenchCollective::kReduce ||
                             params_.collective == BenchCollective::kGather;
  if (rooted_output && params_.rank != params_.root) return 0;
  const DataType dtype = params_.dtype;
  const void* out = at(recv, recv_offset(), dtype);
  size_t wrong = 0;
  for (size_t i = 0; i < recv_extent(); ++i)
    wrong += load_value(dtype, out, i) != static_cast<double>(expected(i));
  return wrong;
}

}  // namespace chorus::bench
