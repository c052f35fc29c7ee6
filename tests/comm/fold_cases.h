// Reductions checked bit for bit against the serial rank-order fold: the unit the tests of
// deterministic mode enumerate (communicator.h, "Deterministic mode").
//
// Inputs are chosen so that the order of the additions shows in the bits: floats of magnitudes
// 2^-16 .. 2^16 (2^-8 .. 2^8 for f16) with random mantissas, distinct per rank and index,
// so that (a + b) + c and (b + c) + a round differently at many elements; products of values in
// [1, 2); and zeros of either sign at every 13th element, where min and max return the later
// operand of two equal ones. Integers are random too (their ops are associative, so any order
// gives the same bits; they check the plumbing).
//
// The reference is acc = x_0; acc = acc op x_r for r = 1..n-1, by kernels::reduce (one rounding
// per step for f16 and bf16), and kernels::divide by n for avg.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "chorus/communicator.h"

namespace chorus::testing {

struct FoldCase {
  Collective coll = Collective::kAllReduce;  // kAllReduce, kReduceScatter or kReduce
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  size_t count = 0;  // as the call counts: reduce_scatter's recv_count
  bool in_place = false;
  int root = 0;
  int salt = 0;

  std::string describe() const;
};

// Rank `rank`'s input: `count` elements of k.dtype (k's op and salt choose them).
void fill_order_sensitive(const FoldCase& k, int rank, void* buf, size_t count);

// The serial fold of the n ranks' inputs of `count` elements each (see above).
std::vector<std::byte> rank_order_fold(const FoldCase& k, int n, size_t count);

// The fold and this rank's input for one case, computed once and checked against every
// algorithm in turn.
class FoldCheck {
 public:
  FoldCheck(const FoldCase& k, int rank, int n);
  // Runs the case with `algo` forced ("auto", "ring", "twoshot/fifo", ...; set_algorithm) and
  // returns how many elements of this rank's result differ from the fold, in bits (0 on ranks
  // that receive no result). Every other call goes through the *_async form, whose
  // Work::algorithm() is then stored in *ran when ran is not null (else "").
  // `why`: the first difference, described.
  size_t differing(Communicator& comm, const std::string& algo, std::string* why = nullptr,
                   std::string* ran = nullptr);

 private:
  FoldCase k_;
  int rank_, n_;
  std::vector<std::byte> input_;     // this rank's whole input
  std::vector<std::byte> expected_;  // this rank's result, when it receives one
};

// Checks `k` with every algorithm of `algos`: bits equal to the fold, and (in deterministic
// mode) every call run by an algorithm that folds in rank order. Failures go to EXPECT_*.
void check_against_fold(Communicator& comm, const FoldCase& k,
                        const std::vector<std::string>& algos);

}  // namespace chorus::testing
