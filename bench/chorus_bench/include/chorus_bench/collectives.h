// chorus-bench — what the benchmark knows about each collective: its name, whether it reduces or
// has a root, what a "size" means for it, nccl-tests' bus-bandwidth factor, and the list of sizes
// a run measures.
//
// Sizes are bytes, as in nccl-tests:
//   all_reduce, broadcast, reduce, sendrecv     the per-rank buffer (count = size / dtype size)
//   reduce_scatter, all_gather, gather,         the total over ranks, world_size x chunk
//   scatter, all_to_all                         (count = the chunk, size / world_size / dtype size)
// busbw = algbw x factor, so that it can be compared with the hardware's link bandwidth whatever
// the world size: 2(n-1)/n for all_reduce, (n-1)/n for the total-size collectives, 1 for the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "chorus/types.h"

namespace chorus::bench {

enum class BenchCollective : uint8_t {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kGather,
  kScatter,
  kAllToAll,
  kSendRecv,
};

// In the order `chorus-bench all` runs them.
inline constexpr BenchCollective kAllBenchCollectives[] = {
    BenchCollective::kAllReduce, BenchCollective::kReduceScatter, BenchCollective::kAllGather,
    BenchCollective::kBroadcast, BenchCollective::kReduce,        BenchCollective::kGather,
    BenchCollective::kScatter,   BenchCollective::kAllToAll,      BenchCollective::kSendRecv,
};

// "all_reduce", "reduce_scatter", ... (the names the command line takes).
std::string_view to_string(BenchCollective c);
std::optional<BenchCollective> parse_collective(std::string_view name);

// Takes a ReduceOp (the others print "none" in the redop column).
bool reduces(BenchCollective c);
// Takes a root (the others print -1 in the root column).
bool has_root(BenchCollective c);
// Sizes are the total over ranks rather than the per-rank buffer.
bool size_is_total(BenchCollective c);
// Has an in-place form in the Communicator API (all_to_all and sendrecv do not).
bool supports_in_place(BenchCollective c);
// nccl-tests' busbw / algbw ratio.
double bus_factor(BenchCollective c, int world_size);

// Every measured size is a multiple of this many bytes.
size_t size_unit(BenchCollective c, DataType dtype, int world_size);
// The count argument of the call (and the "count" column) for a size that is a multiple of
// size_unit(): elements per rank buffer, or per chunk for the total-size collectives.
size_t call_count(BenchCollective c, size_t bytes, DataType dtype, int world_size);

// -b/-e with either -f (geometric) or -i (arithmetic).
struct SizeRange {
  size_t min_bytes = 0;
  size_t max_bytes = 0;
  uint64_t factor = 2;    // used when step_bytes is 0
  size_t step_bytes = 0;  // > 0: min, min + step, ...
};

// The sizes a run measures: the range's sizes rounded down to a multiple of size_unit(), without
// duplicates; a size that would round to 0 is replaced by the smallest valid size (the unit), so a
// run starts there and never prints a 0-byte line. Empty when the unit exceeds max_bytes.
std::vector<size_t> size_list(BenchCollective c, const SizeRange& range, DataType dtype,
                              int world_size);

}  // namespace chorus::bench
