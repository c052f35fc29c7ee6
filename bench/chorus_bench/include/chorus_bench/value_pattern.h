// chorus-bench — the values ranks put into their send buffers, and the exact result every element
// of a collective's output must hold.
//
// Every value is an integer, chosen so that each input, each partial result a reduction can form
// in any order, and the final result are exactly representable in the element type: |x| <= bound,
// where the bound is 2^24 for float, double, int32 and int64 (their exact-integer range, capped),
// 2^11 for half, 2^8 for bfloat16, 127 for int8 and 254 for uint8. Then any reduction order gives
// the same bits, and a result can be compared for equality with the value computed on the host.
//
//   no op, min, max  v(r, i) = a hash of (r, i) in [-bound, bound] ([0, bound] for uint8)
//   sum              v(r, i) in [0, bound / n]: no sum of n of them passes the bound
//   prod             v(r, i) in {1, 2} (and their negatives for signed types), with at most
//                    log2(bound) twos per index, so |product| <= bound
//   avg              v(r, i) = c(i) + e(r, i) with c(i) >= 1 and e in {+1, -1, 0} pairing ranks so
//                    that the e(., i) sum to 0: the sum is n c(i), its average exactly c(i), and
//                    partial sums stay within n (c(i) + 1) <= bound. When n is too large for
//                    that (n > bound / 2), all values are 0.
// Values depend on both rank and index, so a block delivered to the wrong rank or offset shows up
// as wrong elements. Output buffers are filled beforehand with a sentinel that no input or result
// ever takes (NaN for floating types, a value past the bound for integers), so an element a
// collective fails to write is counted wrong too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "chorus/types.h"

namespace chorus::bench {

class ValuePattern {
 public:
  // op = nullopt for the collectives that only move data.
  ValuePattern(DataType dtype, std::optional<ReduceOp> op, int world_size);

  // The value rank `rank` puts at element `index` of its send buffer.
  int64_t input(int rank, size_t index) const;
  // op applied over every rank's input(r, index), r = 0 .. n-1 (requires an op).
  int64_t reduced(size_t index) const;

  // The largest |value| any input, partial or final result takes.
  int64_t bound() const { return bound_; }
  DataType dtype() const { return dtype_; }
  std::optional<ReduceOp> op() const { return op_; }
  int world_size() const { return world_size_; }

 private:
  DataType dtype_;
  std::optional<ReduceOp> op_;
  int world_size_;
  int64_t bound_;
  int64_t low_;        // smallest value of the no-op/min/max pattern
  int64_t sum_max_;    // sum: inputs in [0, sum_max_]
  int prod_twos_;      // prod: at most this many twos per index
  int64_t avg_range_;  // avg: c(i) in [1, avg_range_]; 0 = all values 0
};

// The value of the exact-integer bound for a type (see above).
int64_t value_bound(DataType dtype);

// Stores `value` (exactly representable, see ValuePattern) as element `index` of `buffer`.
void store_value(DataType dtype, void* buffer, size_t index, int64_t value);
// Element `index` of `buffer` as a double (exact for every value a ValuePattern produces).
double load_value(DataType dtype, const void* buffer, size_t index);
// Fills `count` elements with the sentinel: NaN for floating types, -128 for int8, 255 for uint8,
// the type's minimum for int32 and int64. It never compares equal to a pattern value.
void fill_sentinel(DataType dtype, void* buffer, size_t count);

}  // namespace chorus::bench
