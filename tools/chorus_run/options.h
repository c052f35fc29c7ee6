// chorus-run — command-line options.
#pragma once

#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::run {

struct Options {
  int nproc_per_node = 0;  // -n: ranks started by this chorus-run
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: the kernel picks a free port (single-node jobs only)
  bool tag_output = false;
  double grace_seconds = 3.0;        // --grace, else CHORUS_RUN_GRACE
  std::string bind = "none";         // --bind: none, cores or numa (cpu_binding.h)
  std::vector<std::string> command;  // PROGRAM ARGS...
  bool help = false;
  bool print_env = false;
};

// A malformed command line; what() is a one-line reason. chorus-run prints it with the synopsis
// and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses the arguments after argv[0]. Options stop at the first non-option word (PROGRAM) or at
// "--". Throws UsageError.
Options parse_options(std::span<const std::string> args);

std::string_view usage_synopsis();
std::string_view help_text();

}  // namespace chorus::run
