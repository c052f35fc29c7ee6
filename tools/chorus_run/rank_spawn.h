// chorus-run — the environment of each rank, and starting one.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "chorus/error.h"

namespace chorus::run {

// The job as this chorus-run sees it.
struct JobLayout {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  std::string job_id;
  int status_fd = -1;  // CHORUS_RUN_STATUS_FD when >= 0 (failure_reports.h)

  int world_size() const { return nnodes * nproc_per_node; }
  int global_rank(int local_rank) const { return node_rank * nproc_per_node + local_rank; }
};

// `inherited` (an environ-style array) with every variable chorus-run sets removed, then the
// launch variables of local rank `local_rank`; CHORUS_STORE_FD only when store_fd is given.
std::vector<std::string> rank_environment(const JobLayout& layout, int local_rank,
                                          std::optional<int> store_fd,
                                          const char* const* inherited);

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  std::vector<std::string> env;
  int stdout_fd = -1;  // becomes the rank's stdout; -1 inherits ours
  int stderr_fd = -1;
  // Close-on-exec fds the rank keeps (the store listener on rank 0, the failure-report pipe).
  std::vector<int> inherit_fds;
  std::vector<int> cpus;  // PUs (OS indexes) the rank is bound to; empty: not bound
};

// PROGRAM could not be executed; message() names it and the reason.
class ExecError : public Error {
 public:
  explicit ExecError(std::string message) : Error(ErrorKind::kSystem, std::move(message)) {}
};

// Forks and execs one rank in a process group of its own, set to die with SIGKILL if chorus-run
// dies first. Returns its pid once exec has succeeded; throws ExecError (the child reaped) when
// it failed.
pid_t spawn_rank(const SpawnSpec& spec);

}  // namespace chorus::run
