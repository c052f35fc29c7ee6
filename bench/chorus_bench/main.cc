// chorus-bench: nccl-tests-style benchmark of the chorus collectives. See `chorus-bench -h`.
#include <cstdio>
#include <fstream>
#include <string_view>
#include <vector>

#include "bench_runner.h"
#include "chorus/communicator.h"
#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/gpu/runtime.h"
#include "chorus/knob_table.h"
#include "chorus/launch_env.h"
#include "chorus_bench/options.h"
#include "chorus_bench/report.h"

namespace {

using chorus::bench::Options;

constexpr int kExitWrong = 1;
constexpr int kExitUsage = 2;

// The rank from the launcher's variables, before a communicator exists, so that only rank 0
// reports a bad command line.
int launch_rank() {
  try {
    return chorus::detect_launch_env().rank;
  } catch (const chorus::Error&) {
    return 0;
  }
}

// --device: this rank's device, CHORUS_LOCAL_RANK % count, made current before the communicator
// exists. False (with the reason printed by rank 0) when there is none.
bool use_device() {
  const chorus::gpu::Devices devices = chorus::gpu::probe_devices();
  if (devices.count == 0) {
    if (launch_rank() == 0)
      std::fprintf(stderr, "chorus-bench: --device: no GPU: %s\n", devices.reason.c_str());
    return false;
  }
  chorus::gpu::set_device(chorus::local_device_index(devices.count));
  return true;
}

int run(const Options& options) {
  if (options.device && !use_device()) return kExitWrong;
  chorus::Communicator comm = chorus::Communicator::from_env();
  const bool printer = comm.rank() == 0;
  if (options.root >= comm.size()) {
    if (printer)
      std::fprintf(stderr, "chorus-bench: root %d is not a rank of this %d-rank job\n",
                   options.root, comm.size());
    return kExitUsage;
  }
  if (!options.algorithm.empty()) {
    try {
      comm.set_algorithm(options.algorithm);
    } catch (const chorus::InvalidArgument& e) {
      if (printer) std::fprintf(stderr, "chorus-bench: --algo: %s\n", e.message().c_str());
      return kExitUsage;
    }
  }

  chorus::bench::BenchRunner runner(comm, options, stdout);
  std::vector<chorus::bench::Row> rows;
  for (size_t i = 0; i < options.collectives.size(); ++i) {
    if (printer && i > 0) std::fputs("\n", stdout);
    std::vector<chorus::bench::Row> table = runner.run(options.collectives[i]);
    rows.insert(rows.end(), table.begin(), table.end());
  }

  if (printer && !options.json_path.empty()) {
    std::ofstream json(options.json_path);
    json << chorus::bench::format_json(options, comm.size(), rows);
    if (!json.flush()) {
      std::fprintf(stderr, "chorus-bench: cannot write %s\n", options.json_path.c_str());
      return kExitWrong;
    }
  }
  return chorus::bench::total_wrong(rows) == 0 ? 0 : kExitWrong;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  const chorus::bench::ParsedOptions parsed = chorus::bench::parse_options(args);
  if (parsed.print_env) {
    chorus::print_knobs(stdout);
    return 0;
  }
  if (parsed.help || !parsed.error.empty()) {
    if (launch_rank() == 0) {
      if (parsed.help)
        std::fputs(chorus::bench::usage().c_str(), stdout);
      else
        std::fprintf(stderr, "chorus-bench: %s\n\n%s", parsed.error.c_str(),
                     chorus::bench::usage().c_str());
    }
    return parsed.help ? 0 : kExitUsage;
  }
  try {
    return run(parsed.options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chorus-bench: rank %d: %s\n", launch_rank(), e.what());
    return kExitWrong;
  }
}
