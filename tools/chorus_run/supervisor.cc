#include "supervisor.h"

#include <poll.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>

#include "chorus/error.h"
#include "chorus/log.h"
#include "exit_status.h"

namespace chorus::run {
namespace {

using namespace std::chrono_literals;

// Between SIGTERM and SIGKILL.
constexpr auto kKillDelay = 1s;
// How long the output of exited ranks is still copied when a pipe stays open (held by a process
// the rank started).
constexpr auto kDrainTime = 1s;

// Signals a rank's process group, or the rank alone if it has left its group.
void signal_rank(pid_t pid, int signal) {
  if (::kill(-pid, signal) != 0) ::kill(pid, signal);
}

}  // namespace

Supervisor::Supervisor(std::vector<RankProcess>& ranks, ExitQueue& exits, FailureReports* reports,
                       JobGuard* guard, SignalWatch& signals, TaggedOutput& output,
                       Clock::duration grace)
    : ranks_(ranks),
      exits_(exits),
      reports_(reports),
      guard_(guard),
      signals_(signals),
      output_(output),
      grace_(grace),
      signalled_(ranks.size(), false),
      stopped_(ranks.size(), false) {}

JobOutcome Supervisor::run() {
  std::vector<pollfd> fds;
  // Ranks that exited during start-up are queued already.
  reap();
  while (running_count() > 0) {
    fds.clear();
    fds.push_back(pollfd{exits_.fd(), POLLIN, 0});
    fds.push_back(pollfd{signals_.fd(), POLLIN, 0});
    fds.push_back(pollfd{reports_ ? reports_->read_fd() : -1, POLLIN, 0});
    output_.add_pollfds(fds);
    if (::poll(fds.data(), fds.size(), poll_timeout_ms()) < 0) {
      if (errno == EINTR) continue;
      throw_system_error("poll", errno);
    }
    if (fds[2].revents != 0) reports_->read();
    if (fds[0].revents != 0) reap();
    if (fds[1].revents != 0) handle_signals();
    output_.service(std::span<const pollfd>(fds).subspan(3));
    if (deadline_ && Clock::now() >= *deadline_) on_deadline();
  }
  output_.drain(Clock::now() + kDrainTime);
  attribute_first_failure();
  return outcome_;
}

void Supervisor::attribute_first_failure() {
  if (!outcome_.first_failure || reports_ == nullptr) return;
  reports_->read();  // the last reports
  std::vector<RankEnd> ends;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const bool failed = !is_clean_exit(ranks_[i].status);
    ends.push_back({ranks_[i].rank, failed, failed && !signalled_[i], stopped_[i]});
  }
  const std::optional<Culprit> c = find_culprit(ends, *reports_, *outcome_.first_failure);
  if (!c || c->index == *outcome_.first_failure) return;
  if (ends[c->index].failed_itself) {
    outcome_.first_failure = c->index;  // it failed first; the others followed before it died
  } else {
    outcome_.culprit = c;  // still running when the others gave up, or gone before they were
    outcome_.culprit_state =
        !signalled_[c->index]    ? "it exited (code 0) while they still waited for it"
        : ends[c->index].stopped ? "it was stopped (SIGSTOP or a debugger) when chorus-run ended it"
                                 : "it was still running (slow or hung) when chorus-run ended it";
  }
}

namespace {

// Whether /proc says the process is stopped (state T: a signal or a debugger stopped it).
bool is_stopped(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return false;
  char line[512] = {};
  const size_t n = std::fread(line, 1, sizeof line - 1, f);
  std::fclose(f);
  // "pid (comm) S ...": the state follows the last ')' (comm may hold anything).
  const char* close = nullptr;
  for (size_t i = 0; i < n; ++i)
    if (line[i] == ')') close = line + i;
  return close != nullptr && close[1] == ' ' && (close[2] == 'T' || close[2] == 't');
}

}  // namespace

void Supervisor::handle_signals() {
  // SIGCHLD needs nothing: exits come through the exit queue, in order.
  for (int signal : signals_.take()) {
    if (SignalWatch::is_forwarded(signal)) {
      std::fprintf(stderr, "chorus-run: received %s, forwarding it to the ranks\n",
                   signal_name(signal).c_str());
      outcome_.interrupted_by = signal;
      signal_running(signal);
      begin_shutdown();
    }
  }
}

void Supervisor::reap() {
  for (size_t i : exits_.take()) {
    RankProcess& r = ranks_[i];
    int status = 0;
    // The process has exited: this does not block.
    while (::waitpid(r.pid, &status, 0) < 0) {
      if (errno != EINTR) throw_system_error("waitpid", errno);
    }
    // What the rank left in its group goes with it, while the group id cannot have been given
    // out again: it stays reserved while the group has members.
    ::kill(-r.pid, SIGKILL);
    if (guard_ != nullptr) guard_->release(r.pid);
    r.running = false;
    r.status = status;
    CHORUS_INFO(kLogRun, "rank ", r.rank, " (pid ", r.pid, ") ", describe_wait_status(status));
    if (!is_clean_exit(status) && !outcome_.first_failure) {
      outcome_.first_failure = i;
      begin_shutdown();
    }
  }
}

void Supervisor::begin_shutdown() {
  if (phase_ != Phase::kRunning) return;
  phase_ = Phase::kGrace;
  deadline_ = Clock::now() + grace_;
}

void Supervisor::on_deadline() {
  if (phase_ == Phase::kGrace) {
    if (running_count() > 0) {
      CHORUS_INFO(kLogRun, running_count(), " ranks still running after the grace period: SIGTERM");
      outcome_.terminated = true;
      signal_running(SIGTERM);
      signal_running(SIGCONT);
    }
    phase_ = Phase::kTerminating;
    deadline_ = Clock::now() + kKillDelay;
  } else if (phase_ == Phase::kTerminating) {
    if (running_count() > 0) {
      CHORUS_INFO(kLogRun, running_count(), " ranks ignored SIGTERM: SIGKILL");
      signal_running(SIGKILL);
    }
    phase_ = Phase::kKilled;
    deadline_.reset();
  }
}

void Supervisor::signal_running(int signal) {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (!ranks_[i].running) continue;
    if (!signalled_[i]) stopped_[i] = is_stopped(ranks_[i].pid);
    signal_rank(ranks_[i].pid, signal);
    signalled_[i] = true;
  }
}

int Supervisor::running_count() const {
  int n = 0;
  for (const RankProcess& r : ranks_) n += r.running ? 1 : 0;
  return n;
}

int Supervisor::poll_timeout_ms() const {
  if (!deadline_) return -1;
  const auto left = *deadline_ - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  // Rounded up, so the wake-up is never before the deadline.
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
}

void kill_and_reap(std::vector<RankProcess>& ranks) {
  for (RankProcess& r : ranks) {
    if (!r.running) continue;
    signal_rank(r.pid, SIGKILL);
    while (::waitpid(r.pid, &r.status, 0) < 0 && errno == EINTR) {
    }
    r.running = false;
  }
}

}  // namespace chorus::run
