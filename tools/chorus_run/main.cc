// chorus-run: starts the ranks of a chorus job on this host and supervises them.
// `chorus-run --help` describes the command line, the environment each rank gets and the exit
// status; supervisor.h describes how a failing job is shut down.

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/knob_table.h"
#include "chorus/log.h"
#include "cpu_binding.h"
#include "exit_queue.h"
#include "exit_status.h"
#include "failure_reports.h"
#include "job_guard.h"
#include "job_id.h"
#include "options.h"
#include "pipe.h"
#include "rank_spawn.h"
#include "shm_sweep.h"
#include "signal_watch.h"
#include "store_listener.h"
#include "supervisor.h"
#include "tagged_output.h"

namespace chorus::run {
namespace {

constexpr int kExitSetupError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCannotExecute = 127;

// "0-2,5,7-8"
std::string format_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(ranks[i]);
    if (j > i) out += '-' + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

// The first failure on one line, then the other ranks that did not exit cleanly, grouped by how
// they ended. Returns chorus-run's exit code.
int report(const std::vector<RankProcess>& ranks, const JobOutcome& outcome, double grace) {
  if (!outcome.first_failure) return outcome.interrupted_by ? 128 + outcome.interrupted_by : 0;
  const RankProcess& first = ranks[*outcome.first_failure];
  std::fprintf(stderr, "chorus-run: rank %d (pid %d) failed first: %s\n", first.rank, first.pid,
               describe_wait_status(first.status).c_str());
  if (outcome.culprit) {
    // The rank the failed ranks were waiting for, and how that was decided.
    const Culprit& c = *outcome.culprit;
    const RankProcess& r = ranks[c.index];
    std::fprintf(stderr,
                 "chorus-run: likely culprit: rank %d (pid %d), which %s %s failed waiting for "
                 "(from the failure reports, each rank -> the rank its error names: %s); it had "
                 "not failed itself: %s\n",
                 r.rank, r.pid, c.waiting.size() == 1 ? "rank" : "ranks",
                 format_ranks(c.waiting).c_str(), c.reports.c_str(), outcome.culprit_state.c_str());
  }

  std::map<std::string, std::vector<int>> others;
  for (const RankProcess& r : ranks)
    if (&r != &first && !is_clean_exit(r.status))
      others[describe_wait_status(r.status)].push_back(r.rank);
  std::string line;
  for (const auto& [how, group] : others) {
    line += line.empty() ? "" : "; ";
    line += (group.size() == 1 ? "rank " : "ranks ") + format_ranks(group) + " " + how;
  }
  if (!line.empty()) {
    if (outcome.terminated)
      line += detail::concat("; those still running after the ", grace,
                             " s grace period were terminated");
    std::fprintf(stderr, "chorus-run: other ranks: %s\n", line.c_str());
  }
  return exit_code_of(first.status);
}

// Starts every rank of this node, each watched by `exits` and `guard` from the moment it runs;
// with --tag-output their pipes are added to `output`. When one cannot be started, those already
// running are killed and the error is rethrown.
std::vector<RankProcess> start_ranks(const Options& options, const JobLayout& layout,
                                     const StoreListener* listener, TaggedOutput& output,
                                     ExitQueue& exits, JobGuard& guard) {
  std::vector<RankProcess> ranks;
  const std::vector<std::vector<int>> cpus =
      local_cpu_binding(options.bind, options.nproc_per_node);
  try {
    for (int local = 0; local < options.nproc_per_node; ++local) {
      const int rank = layout.global_rank(local);
      const bool hosts_store = rank == 0 && listener != nullptr;
      const std::optional<int> store_fd =
          hosts_store ? std::optional(listener->fd.get()) : std::nullopt;
      SpawnSpec spec;
      spec.argv = options.command;
      spec.env = rank_environment(layout, local, store_fd, environ);
      if (store_fd) spec.inherit_fds.push_back(*store_fd);
      if (layout.status_fd >= 0) spec.inherit_fds.push_back(layout.status_fd);
      spec.cpus = cpus[static_cast<size_t>(local)];
      Pipe out, err;
      if (options.tag_output) {
        out = make_pipe(O_CLOEXEC);
        err = make_pipe(O_CLOEXEC);
        spec.stdout_fd = out.write_end.get();
        spec.stderr_fd = err.write_end.get();
      }
      const pid_t pid = spawn_rank(spec);
      ranks.push_back(RankProcess{rank, pid});
      exits.watch(ranks.size() - 1, pid);
      guard.guard(pid);  // its process group
      if (options.tag_output) {
        const std::string tag = "[" + std::to_string(rank) + "] ";
        output.add(tag, std::move(out.read_end), STDOUT_FILENO);
        output.add(tag, std::move(err.read_end), STDERR_FILENO);
      }
    }
  } catch (const Error&) {
    kill_and_reap(ranks);
    throw;
  }
  return ranks;
}

int launch(const Options& options) {
  SignalWatch signals;  // before the first fork, so no exit goes unseen

  JobLayout layout;
  layout.nproc_per_node = options.nproc_per_node;
  layout.nnodes = options.nnodes;
  layout.node_rank = options.node_rank;
  layout.master_addr = options.master_addr;
  layout.master_port = options.master_port;
  layout.job_id = resolve_job_id(options.nnodes);
  const UniqueFd job_claim = claim_job_id(layout.job_id, options.node_rank);
  // Before any rank and before the store's socket: the guard must hold neither.
  JobGuard guard;
  FailureReports reports;
  layout.status_fd = reports.write_fd();

  std::optional<StoreListener> listener;
  if (options.node_rank == 0) {
    listener = open_store_listener(options.master_addr, options.master_port);
    layout.master_port = listener->port;
  }
  CHORUS_INFO(kLogRun, "job ", layout.job_id, ": ", layout.world_size(), " ranks (",
              options.nproc_per_node, " here), store at ", layout.master_addr, ":",
              layout.master_port);

  TaggedOutput output;
  ExitQueue exits;
  std::vector<RankProcess> ranks;
  try {
    ranks = start_ranks(options, layout, listener ? &*listener : nullptr, output, exits, guard);
  } catch (const Error&) {
    sweep_job_shm(layout.job_id);
    throw;
  }
  // Rank 0 owns the store socket now. Closing our copy means that if rank 0 dies, connecting
  // ranks are refused at once instead of queueing on a socket nobody serves.
  listener.reset();

  const auto grace = std::chrono::duration_cast<Supervisor::Clock::duration>(
      std::chrono::duration<double>(options.grace_seconds));
  const JobOutcome outcome =
      Supervisor(ranks, exits, &reports, &guard, signals, output, grace).run();
  guard.finish();

  for (const std::string& name : sweep_job_shm(layout.job_id))
    CHORUS_INFO(kLogRun, "removed /dev/shm/", name, " left by the job");
  return report(ranks, outcome, options.grace_seconds);
}

int main_impl(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  Options options;
  try {
    options = parse_options(args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "chorus-run: %s\n%.*sTry 'chorus-run --help' for more information.\n",
                 e.what(), static_cast<int>(usage_synopsis().size()), usage_synopsis().data());
    return kExitUsage;
  }
  if (options.help) {
    std::printf("%.*s\n%.*s", static_cast<int>(usage_synopsis().size()), usage_synopsis().data(),
                static_cast<int>(help_text().size()), help_text().data());
    return 0;
  }
  if (options.print_env) {
    chorus::print_knobs(stdout);
    return 0;
  }
  try {
    return launch(options);
  } catch (const ExecError& e) {
    std::fprintf(stderr, "chorus-run: %s\n", e.message().c_str());
    return kExitCannotExecute;
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "chorus-run: %s\n", e.message().c_str());
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "chorus-run: %s\n", e.message().c_str());
    return kExitSetupError;
  }
}

}  // namespace
}  // namespace chorus::run

int main(int argc, char** argv) { return chorus::run::main_impl(argc, argv); }
