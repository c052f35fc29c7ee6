// chorus-bench — runs the measured cases on a Communicator: fill, check, warm up, time; and for
// --sweep-algos and --explain, asks the communicator which algorithms it has and what it
// predicts for them.
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
  // complete (with --sweep-algos, once per algorithm and once more under auto). Collective over
  // the communicator: every rank must call it.
  std::vector<Row> run(BenchCollective collective);

 private:
  // Both placements of one line, with the current algorithm setting.
  Row measure_row(BenchCollective collective, size_t bytes, std::byte* send, std::byte* recv);
  Measurement measure(const CollectiveCase& c, size_t bytes, std::byte* send, std::byte* recv);
  // Times `iters` blocking calls one by one: each iteration's time, max over ranks. `mean_us`
  // (optional) gets the largest over ranks of the average, as the plain timed loop measures it.
  std::vector<double> time_each(const CollectiveCase& c, std::byte* send, std::byte* recv,
                                double* mean_us);
  // Issues the case's collective once on the given allocations.
  Work issue(const CollectiveCase& c, std::byte* send, std::byte* recv);
  // The blocking form of the same call.
  void call(const CollectiveCase& c, std::byte* send, std::byte* recv);
  // Communicator::explain for a line, as the report's Estimates.
  std::vector<Estimate> estimates(BenchCollective collective, size_t bytes) const;
  double max_over_ranks(double value);
  uint64_t sum_over_ranks(uint64_t value);
  void print(const std::string& text);

  Communicator& comm_;
  const Options& options_;
  std::FILE* out_;
};

}  // namespace chorus::bench
