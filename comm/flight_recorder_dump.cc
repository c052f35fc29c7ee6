// The flight recorder's dumps: JSON and the stderr summary of the recorded operations, the
// CHORUS_FR_DIR files, and the CHORUS_FR_SIGNAL handler that dumps every live recorder.
#include "flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "chorus/config.h"
#include "chorus/log.h"

namespace chorus {
namespace {

const StringKnob kFrDir{"CHORUS_FR_DIR", "",
                        "directory for flight-recorder dumps (JSON per rank and communicator) on a "
                        "timeout, a failure or CHORUS_FR_SIGNAL; merge them with tools/chorus-fr"};
const IntKnob kFrSignal{"CHORUS_FR_SIGNAL", 0,
                        "signal number that makes every communicator dump its flight recorder "
                        "(e.g. 10 for SIGUSR1); 0 = none"};

const char* state_name(FlightRecorder::State s) {
  switch (s) {
    case FlightRecorder::State::kQueued:
      return "queued";
    case FlightRecorder::State::kRunning:
      return "running";
    case FlightRecorder::State::kDone:
      return "done";
    case FlightRecorder::State::kFailed:
      return "failed";
  }
  return "?";
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20)
      out += ' ';
    else
      out += c;
  }
  return out;
}

// Live recorders, for the signal-driven dump. The only mutable global of comm/ besides the knob
// registry: a signal has no other way to find them.
std::mutex g_mu;
std::set<FlightRecorder*>& live() {
  static std::set<FlightRecorder*> s;
  return s;
}

// The signal handler only writes a byte; a thread of this process reads it and does the dump.
std::atomic<int> g_signal_fd{-1};  // the pipe's write end
void on_signal(int) {
  const char b = 1;
  (void)!::write(g_signal_fd.load(std::memory_order_relaxed), &b, 1);
}

// Installs the CHORUS_FR_SIGNAL handler when a recorder is made and the knob is set: checked at
// every construction, not once per process, since a rank may be a child forked (with the knob
// in its environment) from a process that made recorders without it. A forked child also
// inherits the parent's handler and pipe but not its reading thread, so it gets its own.
void install_signal() {
  const int64_t sig = kFrSignal.get();
  if (sig <= 0 || sig >= NSIG) return;
  static std::mutex mu;
  static pid_t installed_by = 0;
  static int read_fd = -1;
  static std::set<int64_t> installed;
  std::lock_guard lock(mu);
  if (installed_by != ::getpid()) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    // In a child, the parent's pipe: its reader lives in the parent.
    const int old = g_signal_fd.exchange(fds[1]);
    if (old >= 0) ::close(old);
    if (read_fd >= 0) ::close(read_fd);
    read_fd = fds[0];
    std::thread([fd = fds[0]] {
      char b;
      while (::read(fd, &b, 1) == 1) FlightRecorder::dump_all("signal");
    }).detach();
    installed_by = ::getpid();
    installed.clear();
  }
  if (!installed.insert(sig).second) return;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(static_cast<int>(sig), &sa, nullptr);
}

}  // namespace

void FlightRecorder::enlist(FlightRecorder* r) {
  install_signal();
  std::lock_guard lock(g_mu);
  live().insert(r);
}

void FlightRecorder::delist(FlightRecorder* r) {
  std::lock_guard lock(g_mu);
  live().erase(r);
}

std::string FlightRecorder::json(const std::string& reason) {
  std::vector<int> peers;
  std::string step;
  {
    std::lock_guard lock(waiting_.mu);
    peers = waiting_.peers;
    step = waiting_.step;
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const TickScale scale = tick_scale();
  const auto ops = snapshots();
  // Where the running operation is blocked (one runs at a time), else the newest failed one.
  size_t blocked = ops.size();
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].second.state == State::kRunning)
      blocked = i;
    else if (ops[i].second.state == State::kFailed &&
             (blocked == ops.size() || ops[blocked].second.state != State::kRunning))
      blocked = i;
  }
  std::string s = detail::concat(
      "{\"job\": \"", json_escape(id_.job), "\", \"comm\": \"", json_escape(id_.comm),
      "\", \"rank\": ", id_.rank, ", \"size\": ", id_.size, ", \"host\": \"", json_escape(host),
      "\", \"pid\": ", ::getpid(), ", \"reason\": \"", json_escape(reason),
      "\", \"dumped_us\": ", now_us(),
      ", \"last_issued_seq\": ", last_seq_.load(std::memory_order_relaxed),
      ", \"unrecorded\": ", unrecorded_.load(std::memory_order_relaxed), ", \"ops\": [");
  for (size_t i = 0; i < ops.size(); ++i) {
    const Record& r = ops[i].second;
    s += detail::concat(
        i == 0 ? "\n  " : ",\n  ", "{\"seq\": ", r.seq, ", \"coll\": \"", to_string(r.coll),
        "\", \"count\": ", r.count, ", \"dtype\": \"", to_string(r.dtype), "\", \"op\": \"",
        to_string(r.op), "\", \"root\": ", r.root, ", \"algorithm\": \"", r.algorithm,
        "\", \"state\": \"", state_name(r.state), "\", \"issued_us\": ", scale.us(r.issued),
        ", \"started_us\": ", scale.us(r.started), ", \"ended_us\": ", scale.us(r.ended),
        ", \"record\": ", ops[i].first);
    if (i == blocked) {
      s += detail::concat(", \"step\": \"", json_escape(step), "\", \"waiting_for\": [");
      for (size_t k = 0; k < peers.size(); ++k) s += detail::concat(k ? ", " : "", peers[k]);
      s += "]";
    }
    if (!r.error.empty()) s += ", \"error\": \"" + json_escape(r.error) + "\"";
    s += "}";
  }
  s += "\n]}\n";
  return s;
}

std::string FlightRecorder::summary(size_t n) {
  const TickScale scale = tick_scale();
  const auto ops = snapshots();
  std::string s;
  for (size_t i = ops.size() > n ? ops.size() - n : 0; i < ops.size(); ++i) {
    const Record& r = ops[i].second;
    s += detail::concat("  #", r.seq, " ", to_string(r.coll), " count ", r.count, " ",
                        to_string(r.dtype), " ", r.algorithm, ": ", state_name(r.state),
                        r.ended && r.started
                            ? detail::concat(" in ", scale.us(r.ended) - scale.us(r.started), " us")
                            : std::string(),
                        "\n");
  }
  if (const uint64_t lost = unrecorded_.load(std::memory_order_relaxed))
    s += detail::concat("  (", lost, " operation(s) not recorded: issued while all ", capacity_,
                        " entries were in flight)\n");
  return s;
}

std::string FlightRecorder::dump_to_dir(const std::string& reason) {
  const auto dir = kFrDir.get_if_set();
  if (!dir) return {};
  const std::string path =
      detail::concat(*dir, "/chorus-fr-", id_.job, "-", id_.comm, "-r", id_.rank, ".json");
  std::ofstream out(path);
  out << json(reason);
  if (!out.flush()) {
    CHORUS_WARN(kLogColl, "cannot write the flight recorder to ", path);
    return {};
  }
  return path;
}

void FlightRecorder::dump_all(const std::string& reason) {
  std::lock_guard lock(g_mu);
  for (FlightRecorder* r : live()) {
    const std::string path = r->dump_to_dir(reason);
    if (path.empty()) {
      const std::string text = r->json(reason);
      (void)!::write(STDERR_FILENO, text.data(), text.size());
    }
  }
}

}  // namespace chorus
