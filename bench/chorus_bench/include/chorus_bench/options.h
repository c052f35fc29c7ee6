// chorus-bench — the command line (nccl-tests' flags, including -z, plus --algo, --json, -I,
// --sweep-algos, --explain and --device).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/types.h"
#include "chorus_bench/collectives.h"

namespace chorus::bench {

struct Options {
  std::vector<BenchCollective> collectives;  // one, or all of them for `all`
  SizeRange sizes{32 << 20, 32 << 20, 2, 0};
  int iters = 20;
  int warmup = 5;
  bool check = true;
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  std::string algorithm;  // empty: the selector's choice
  std::string json_path;  // empty: no JSON
  // -z: each timed iteration is a blocking call (the way MPI and Gloo programs call, and the way
  // the anchors time them); false: issue every iteration asynchronously, wait at the end.
  bool blocking = true;
  bool percentiles = false;  // -I 1: also time each iteration on its own, print p50 and p99
  // --blocks N: N timed blocks of `iters` calls each; a line reports the median block's time,
  // the statistic of the MPI and Gloo anchors (bench_common.h), which a stall inside one block
  // does not move. 1: one block, its mean (nccl-tests').
  int blocks = 1;
  bool sweep_algos = false;  // --sweep-algos: one line per (size, algorithm), then auto
  bool explain = false;      // --explain: the tuner's predicted time beside the measured one
  // --device: the buffers in GPU memory (device CHORUS_LOCAL_RANK % device count), every call
  // stream-ordered on one stream and waited for through its Work.
  bool device = false;
  // --register: the device buffers are registered with the communicator
  // (Communicator::register_device_memory), so that the IPC path reads them without copying.
  bool register_memory = false;
};

struct ParsedOptions {
  Options options;
  bool help = false;
  bool print_env = false;  // --print-env: list every CHORUS_* knob and exit
  std::string error;       // non-empty: the command line was rejected, for this reason
};

// Parses the arguments after the program name. Flags take their value as the next argument,
// attached (-b8) or, for long names, after '=' (--minbytes=8).
ParsedOptions parse_options(std::span<const std::string_view> args);

// The --help text.
std::string usage();

}  // namespace chorus::bench
