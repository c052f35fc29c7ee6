// chorus-bench — runs the measured cases on a Communicator: fill, check, warm up, time.
#pragma once

#include <cstdio>
#include <vector>

#include "chorus/communicator.h"
#include "chorus_bench/collective_case.h"
#include "chorus_bench/options.h"
#include "chorus_bench/report.h"

namespace chorus::bench {

class BenchRunner {
 public:
  // Rank 0 prints tables to `out`; other ranks print nothing.
  BenchRunner(Communicator& comm, const Options& options, std::FILE* out);

  // Measures every size of one collective, both placements, printing the table as lines
  // complete. Collective over the communicator: every rank must call it.
  std::vector<Row> run(BenchCollective collective);

 private:
  Measurement measure(const CollectiveCase& c, size_t bytes, std::byte* send, std::byte* recv);
  // Issues the case's collective once on the given allocations.
  Work issue(const CollectiveCase& c, std::byte* send, std::byte* recv);
  double max_over_ranks(double value);
  uint64_t sum_over_ranks(uint64_t value);
  void print(const std::string& text);

  Communicator& comm_;
  const Options& options_;
  std::FILE* out_;
};

}  // namespace chorus::bench
