// chorus-bench — the output: nccl-tests' table (one line per size, out-of-place and in-place
// columns, plus the algorithm that ran), its footer, and the --json document.
//
// Optional columns, present only when asked for (TableInfo says which):
//   -I 1        p50 and p99 (us) after each placement's busbw/#wrong: the median and 99th
//               percentile over iterations of the per-iteration time (max over ranks)
//   --explain   pred (us) before the algorithm: the tuner's predicted time for the algorithm the
//               line ran ("-" where it has none); without --sweep-algos each line is followed by
//               a "#   predicted" line with every registered algorithm's prediction
//   --sweep-algos  one line per (size, algorithm): every registered algorithm forced in turn,
//               then "auto"; '*' marks the algorithm the selector picks for that size
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chorus/types.h"
#include "chorus_bench/collectives.h"
#include "chorus_bench/options.h"

namespace chorus::bench {

// One placement of one line.
struct Measurement {
  bool available = false;         // false: the collective has no such placement (N/A)
  double time_us = 0;             // largest over ranks of the average per-iteration time
  double algbw_gbps = 0;          // bytes / time, GB = 1e9 bytes
  double busbw_gbps = 0;          // algbw x bus_factor
  std::optional<uint64_t> wrong;  // summed over ranks; nullopt when not checked
  std::string algorithm;          // Work::algorithm() of the timed operations
  // -I 1: median and 99th percentile over iterations of each iteration's time (max over ranks).
  std::optional<double> p50_us;
  std::optional<double> p99_us;
};

// The median (mean of the two middle values for an even count) and the 99th percentile
// (nearest rank: the ceil(0.99 n)-th smallest, so the maximum below 100 samples). 0 when empty.
double percentile_median(std::vector<double> samples);
double percentile_99(std::vector<double> samples);

// One algorithm's prediction for a line (Communicator::explain, without the comm dependency).
struct Estimate {
  std::string algorithm;
  double predicted_us = -1;  // < 0: no estimate ("-")
  bool chosen = false;       // what the selector picks for this size
};

// Fills time, algbw and busbw from the size and the measured time.
Measurement make_measurement(BenchCollective c, int world_size, size_t bytes, double time_us);

struct Row {
  BenchCollective collective = BenchCollective::kAllReduce;
  size_t bytes = 0;
  size_t count = 0;
  DataType dtype = DataType::kF32;
  std::optional<ReduceOp> op;  // nullopt: "none"
  int root = -1;               // -1 for collectives without a root
  Measurement out_of_place;
  Measurement in_place;
  // --sweep-algos: the algorithm this line forced ("auto": the selector's choice), and whether the
  // selector picks it for this size (on the auto line: always).
  std::string forced;
  bool selected = false;
  // --explain: every registered algorithm's prediction for this size, and the one for the
  // algorithm this line ran (nullopt: not asked; < 0: no estimate).
  std::vector<Estimate> estimates;
  std::optional<double> predicted_us;
};

// What the title line says about a table.
struct TableInfo {
  BenchCollective collective = BenchCollective::kAllReduce;
  int world_size = 1;
  DataType dtype = DataType::kF32;
  std::optional<ReduceOp> op;
  int iters = 0;
  int warmup = 0;
  std::string algorithm;  // empty: "auto"
  bool blocking = true;
  bool percentiles = false;  // p50 and p99 columns
  bool explain = false;      // pred column (and "#   predicted" lines unless sweep_algos)
  bool sweep_algos = false;
  bool device = false;      // --device: ", device memory" in the title line
  int blocks = 1;           // --blocks: "3 blocks x 20 iters" in the title line
  bool registered = false;  // --register: ", registered" after ", device memory"
};

// "# chorus-bench: all_reduce, 4 ranks, float, sum, 20 iters, 5 warmup, algo auto, blocking"
// followed by the three column-header lines.
std::string format_table_header(const TableInfo& info);
// The line, and with --explain outside a sweep the "#   predicted" line after it. The optional
// columns follow `info`.
std::string format_row(const Row& row, const TableInfo& info);
std::string format_row(const Row& row);  // no optional columns
// "#   predicted (us):  ring* 12.30  tree -  direct 8.10" ('*' = the selector's choice).
std::string format_predictions(const std::vector<Estimate>& estimates);
// "# Out of bounds values : 0 OK" and "# Avg bus bandwidth    : 1.234".
std::string format_footer(const std::vector<Row>& rows);

// Time as nccl-tests prints it: 2 decimals below 100 us, 1 below 10 ms, none above.
std::string format_time(double time_us);
// Wrong elements over every row and placement.
uint64_t total_wrong(const std::vector<Row>& rows);
// The mean busbw over every available (row, placement).
double average_busbw(const std::vector<Row>& rows);

// The run's parameters and one object per (row, placement).
std::string format_json(const Options& options, int world_size, const std::vector<Row>& rows);

}  // namespace chorus::bench
