// chorus-bench — one rank's view of one measured case (collective, count, placement): how big
// its buffers are, where send and recv point inside them, what to put in them beforehand, and
// how many elements of the result are wrong afterwards.
//
// Out of place, send and recv are two buffers. In place, there is one buffer (the recv
// allocation) and both pointers go into it, following NCCL's rules (c = the call's count):
//   all_reduce, broadcast, reduce   send == recv
//   reduce_scatter, scatter         buffer of n c; send == buffer, recv == buffer + rank c
//   all_gather, gather              buffer of n c; send == buffer + rank c, recv == buffer
// all_to_all and sendrecv have no in-place form.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chorus/types.h"
#include "chorus_bench/collectives.h"
#include "chorus_bench/value_pattern.h"

namespace chorus::bench {

enum class Placement : uint8_t { kOutOfPlace, kInPlace };

std::string_view to_string(Placement p);  // "out-of-place", "in-place"

struct CaseParams {
  BenchCollective collective = BenchCollective::kAllReduce;
  Placement placement = Placement::kOutOfPlace;
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;  // ignored by collectives that do not reduce
  int root = 0;                  // ignored by collectives without a root
  int rank = 0;
  int world_size = 1;
  size_t count = 0;  // the call's count argument (see call_count)
};

class CollectiveCase {
 public:
  explicit CollectiveCase(const CaseParams& params);

  const CaseParams& params() const { return params_; }
  const ValuePattern& pattern() const { return pattern_; }
  bool in_place() const { return params_.placement == Placement::kInPlace; }

  // Elements of the send allocation (0 in place) and of the recv allocation.
  size_t send_elements() const { return in_place() ? 0 : send_extent(); }
  size_t recv_elements() const;
  // Where the call's pointers go, in elements from the start of their allocation (in place,
  // both are offsets into the recv allocation).
  size_t send_offset() const;
  size_t recv_offset() const;

  // Writes the inputs this rank contributes at the send pointer and the sentinel everywhere
  // else, so unwritten output elements are caught. `send` is ignored in place.
  void fill(void* send, void* recv) const;
  // The elements of this rank's output that differ from the exact result; 0 on ranks that get no
  // output (reduce and gather away from the root).
  size_t count_wrong(const void* recv) const;

 private:
  // Elements the send and recv pointers cover.
  size_t send_extent() const;
  size_t recv_extent() const;
  // Whether this rank's send buffer carries data (broadcast and scatter read only the root's).
  bool contributes() const;
  // The exact value of element `i` of this rank's output (from the recv pointer).
  int64_t expected(size_t i) const;

  CaseParams params_;
  ValuePattern pattern_;
};

}  // namespace chorus::bench
