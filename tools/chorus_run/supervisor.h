// chorus-run — watching the ranks until all have exited.
//
// One poll() waits on the ranks' exits (exit_queue.h, in the order they happened), a signalfd
// (the signals to forward) and the ranks' output pipes, with a timeout only while a deadline is
// armed; nothing spins. The shutdown of a failing job runs through these phases:
//   running     -> a rank fails (non-zero exit or a signal): the others get `grace` to exit on
//                  their own (they may notice the failure themselves)
//   grace       -> deadline: SIGTERM, then SIGCONT (a stopped rank must be able to act on it), to
//                  every rank still running
//   terminating -> one second later: SIGKILL
// Signals go to each rank's process group: the rank and whatever it started; what is left of a
// group when its rank exits is killed then (and the guard told to let go of it). The first failure
// is the first rank to exit with one, unless the ranks' reports (failure_reports.h) lead to
// another rank that failed by itself (culprit.h); when they lead to a rank that had not failed
// (stopped or slow: chorus-run had to end it), that rank is the job's likely culprit.
// A signal forwarded from the user starts the same sequence at the grace phase.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "culprit.h"
#include "exit_queue.h"
#include "failure_reports.h"
#include "job_guard.h"
#include "signal_watch.h"
#include "tagged_output.h"

namespace chorus::run {

struct RankProcess {
  int rank = 0;  // global rank
  pid_t pid = -1;
  bool running = true;
  int status = 0;  // the wait status, once reaped
};

struct JobOutcome {
  std::optional<size_t> first_failure;  // index into the ranks, by time of reaping
  int interrupted_by = 0;               // the last signal forwarded to the ranks, 0 if none
  bool terminated = false;              // chorus-run had to SIGTERM or SIGKILL ranks
  // The rank the failed ranks were waiting for, when it is not the first failure and had not
  // failed by itself, and how it ended ("stopped (SIGSTOP or a debugger) when chorus-run ended
  // it after the grace period", ...).
  std::optional<Culprit> culprit;
  std::string culprit_state;
};

class Supervisor {
 public:
  using Clock = std::chrono::steady_clock;

  // `exits` watches every rank, by its index in `ranks`; `reports` (optional) has what they say
  // about their failures; `guard` (optional) guards their process groups.
  Supervisor(std::vector<RankProcess>& ranks, ExitQueue& exits, FailureReports* reports,
             JobGuard* guard, SignalWatch& signals, TaggedOutput& output, Clock::duration grace);

  // Returns once every rank has been reaped (what it left in its process group killed) and their
  // output copied.
  JobOutcome run();

 private:
  enum class Phase { kRunning, kGrace, kTerminating, kKilled };

  void handle_signals();
  void reap();
  void begin_shutdown();
  void on_deadline();
  void signal_running(int signal);
  void attribute_first_failure();
  int running_count() const;
  int poll_timeout_ms() const;

  std::vector<RankProcess>& ranks_;
  ExitQueue& exits_;
  FailureReports* reports_;
  JobGuard* guard_;
  SignalWatch& signals_;
  TaggedOutput& output_;
  Clock::duration grace_;
  Phase phase_ = Phase::kRunning;
  std::optional<Clock::time_point> deadline_;
  JobOutcome outcome_;
  std::vector<bool> signalled_;  // by rank index: chorus-run signalled it while it ran
  std::vector<bool> stopped_;    // by rank index: stopped when chorus-run first signalled it
};

// Kills every running rank's process group and reaps it (used when the job cannot start).
void kill_and_reap(std::vector<RankProcess>& ranks);

}  // namespace chorus::run
