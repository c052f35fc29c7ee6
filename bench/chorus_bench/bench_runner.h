// chorus-bench — runs the measured cases on a Communicator: fill, check, warm up, time; and for
// --sweep-algos and --explain, asks the communicator which algorithms it has and what it
// predicts for them. With --device the buffers are device memory on the calling thread's
// current device: inputs are written to a host mirror and copied up, outputs copied back to be
// checked, and every call is stream-ordered on the runner's stream and waited for by its Work.
#pragma once

#include <cstdio>
#include <optional>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/gpu/runtime.h"
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
  // A line's allocations: what the calls use (device memory with --device) and the host memory
  // where inputs are written and outputs checked (the same pointers without --device).
  struct Buffers {
    std::byte* send;
    std::byte* recv;
    std::byte* host_send;
    std::byte* host_recv;
  };
  // Both placements of one line, with the current algorithm setting.
  Row measure_row(BenchCollective collective, size_t bytes, const Buffers& b);
  Measurement measure(const CollectiveCase& c, size_t bytes, const Buffers& b);
  // Writes the case's inputs (and copies them to the device).
  void fill(const CollectiveCase& c, const Buffers& b);
  // This rank's wrong output elements (copied back from the device first).
  size_t count_wrong(const CollectiveCase& c, const Buffers& b);
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
  // Where the buffers are, as the selector prices them (--device: device memory).
  BufferMemory memory() const { return stream_ ? BufferMemory::kDevice : BufferMemory::kHost; }
  double max_over_ranks(double value);
  uint64_t sum_over_ranks(uint64_t value);
  void print(const std::string& text);

  Communicator& comm_;
  const Options& options_;
  std::FILE* out_;
  std::optional<gpu::OwnedStream> stream_;  // --device: every call is ordered on it
};

}  // namespace chorus::bench
