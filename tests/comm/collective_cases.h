// One collective call checked against the exact reference: the unit the matrix tests enumerate.
#pragma once

#include <string>
#include <vector>

#include "chorus/communicator.h"

namespace chorus::testing {

struct Case {
  Collective coll = Collective::kAllReduce;
  std::string algo = "auto";
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  size_t count = 0;
  bool in_place = false;
  int root = 0;
  int salt = 0;
  bool async = false;  // issue with *_async(...).wait()

  std::string describe() const;
};

// Runs `k` on every rank of `comm` (collectively) and checks this rank's output exactly;
// failures are reported with EXPECT_* and the case description.
void run_and_check(Communicator& comm, const Case& k);

// The algorithms registered for a collective (e.g. {"ring", "tree", "direct"}).
std::vector<std::string> algorithms_of(Collective coll);

}  // namespace chorus::testing
