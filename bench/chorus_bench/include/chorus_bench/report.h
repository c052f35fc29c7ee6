// chorus-bench — the output: nccl-tests' table (one line per size, out-of-place and in-place
// columns, plus the algorithm that ran), its footer, and the --json document.
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
};

// "# chorus-bench: all_reduce, 4 ranks, float, sum, 20 iters, 5 warmup, algo auto" followed by
// the three column-header lines.
std::string format_table_header(const TableInfo& info);
std::string format_row(const Row& row);
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
