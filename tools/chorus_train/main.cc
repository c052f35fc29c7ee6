// chorus-train: trains the GPT at any parallel configuration (see --help and
// docs/PARALLELISM.md). Every rank parses the same flags and decides the same way, so a usage
// error stops every rank before any work, with one message (from rank 0).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/knob_table.h"
#include "chorus/parallel/checkpoint.h"
#include "options.h"
#include "show_schedule.h"
#include "trainer.h"

int main(int argc, char** argv) {
  using namespace chorus;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args)
    if (a == "-h" || a == "--help") {
      std::fputs(train::usage().c_str(), stdout);
      return 0;
    }
  // Every knob of chorus: this program links every layer whole (CMakeLists.txt).
  if (std::find(args.begin(), args.end(), "--print-env") != args.end()) {
    print_knobs(stdout);
    return 0;
  }
  train::Options options;
  try {
    options = train::parse_options(args);
  } catch (const train::UsageError& e) {
    std::fprintf(stderr, "chorus-train: %s\n", e.message.c_str());
    return 2;
  }
  if (!options.convert_from.empty()) {
    // One process, no communicator: a checkpoint directory to one file, or back.
    const std::string& from = options.convert_from;
    const std::string& to = options.convert_to;
    try {
      if (std::filesystem::is_directory(from)) {
        parallel::export_checkpoint(from, to);
        std::printf("exported %s to %s\n", from.c_str(), to.c_str());
      } else {
        parallel::import_checkpoint(from, to);
        std::printf("imported %s into %s\n", from.c_str(), to.c_str());
      }
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "chorus-train: %s\n", e.what());
      return 1;
    }
  }
  if (options.show_schedule) {
    // The mesh the flags name (unnamed axes 1), checked like a run's, then its schedule.
    const int world = std::max(options.dp, 1) * std::max(options.tp, 1) * std::max(options.pp, 1);
    try {
      const train::Mesh mesh = train::resolve_mesh(options, world);
      return train::show_schedule(options, mesh);
    } catch (const train::UsageError& e) {
      std::fprintf(stderr, "chorus-train: %s\n", e.message.c_str());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "chorus-train: %s\n", e.what());
      return 1;
    }
  }
  try {
    // A trace reads every collective from the flight recorders: keep a step's worth of them.
    if (!options.trace.empty()) setenv("CHORUS_FR_ENTRIES", "8192", /*overwrite=*/0);
    CommOptions comm_options;
    if (options.deterministic) comm_options.deterministic = true;
    Communicator world = Communicator::from_env(comm_options);
    train::Mesh mesh;
    try {
      mesh = train::resolve_mesh(options, world.size());
    } catch (const train::UsageError& e) {
      if (world.rank() == 0) std::fprintf(stderr, "chorus-train: %s\n", e.message.c_str());
      return 2;
    }
    return train::run(options, mesh, world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chorus-train: %s\n", e.what());
    return 1;
  }
}
