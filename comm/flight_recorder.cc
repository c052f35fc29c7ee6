#include "flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <thread>

#include "chorus/config.h"
#include "chorus/log.h"
#include "transport/futex.h"

namespace chorus {
namespace {

const IntKnob kFrEntries{"CHORUS_FR_ENTRIES", 256, "operations each communicator's flight recorder keeps"};
const StringKnob kFrDir{"CHORUS_FR_DIR", "",
                        "directory for flight-recorder dumps (JSON per rank and communicator) on a "
                        "timeout, a failure or CHORUS_FR_SIGNAL; merge them with tools/chorus-fr"};
const IntKnob kFrSignal{"CHORUS_FR_SIGNAL", 0,
                        "signal number that makes every communicator dump its flight recorder "
                        "(e.g. 10 for SIGUSR1); 0 = none"};

int64_t now_us() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

const char* state_name(FlightRecorder::State s) {
  switch (s) {
    case FlightRecorder::State::kQueued: return "queued";
    case FlightRecorder::State::kRunning: return "running";
    case FlightRecorder::State::kDone: return "done";
    case FlightRecorder::State::kFailed: return "failed";
  }
  return "?";
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
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

// The signal handler only writes a byte; a thread started with the first recorder does the dump.
int g_pipe[2] = {-1, -1};
void on_signal(int) {
  const char b = 1;
  (void)!::write(g_pipe[1], &b, 1);
}

void install_signal_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    const int sig = static_cast<int>(kFrSignal.get());
    if (sig <= 0 || sig >= NSIG || ::pipe2(g_pipe, O_CLOEXEC) != 0) return;
    std::thread([] {
      char b;
      while (::read(g_pipe[0], &b, 1) == 1) FlightRecorder::dump_all("signal");
    }).detach();
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  });
}

}  // namespace

void FlightRecorder::SpinLock::lock_contended() {
  for (int spins = 0; locked_.exchange(true, std::memory_order_acquire); ++spins) {
    if (spins < 64) transport::cpu_relax();
    else std::this_thread::yield();
  }
}

uint64_t FlightRecorder::clock_ticks() { return static_cast<uint64_t>(now_us()); }

FlightRecorder::TickScale FlightRecorder::tick_scale() const {
#ifdef CHORUS_FR_TSC
  // The counter's rate from construction to now; a recorder younger than 2 ms waits for a
  // measurable span (dumps are rare).
  int64_t now = now_us();
  uint64_t now_ticks = ticks();
  while (now - base_us_ < 2000) {
    std::this_thread::sleep_for(std::chrono::microseconds(2000 - (now - base_us_)));
    now = now_us();
    now_ticks = ticks();
  }
  return {base_us_, base_ticks_,
          static_cast<double>(now_ticks - base_ticks_) / static_cast<double>(now - base_us_)};
#else
  return {0, 0, 1};
#endif
}

int64_t FlightRecorder::TickScale::us(uint64_t t) const {
  if (t == 0) return 0;
  const double since = static_cast<double>(static_cast<int64_t>(t - base_ticks));
  return base_us + static_cast<int64_t>(since / ticks_per_us);
}

FlightRecorder::FlightRecorder(Identity id, size_t capacity)
    : id_(std::move(id)), base_us_(now_us()), base_ticks_(ticks()),
      ring_(std::max<size_t>(1, capacity ? capacity : static_cast<size_t>(kFrEntries.get()))) {
  install_signal_once();
  std::lock_guard lock(g_mu);
  live().insert(this);
}

FlightRecorder::~FlightRecorder() {
  std::lock_guard lock(g_mu);
  live().erase(this);
}

uint64_t FlightRecorder::issued(const Record& r, bool started) {
  const uint64_t now = ticks();
  std::lock_guard lock(mu_);
  const uint64_t id = next_++;
  Record& slot = ring_[id % ring_.size()];
  // Field by field: the error string keeps its storage (and is usually empty already).
  slot.seq = r.seq;
  slot.coll = r.coll;
  slot.count = r.count;
  slot.dtype = r.dtype;
  slot.op = r.op;
  slot.root = r.root;
  slot.algorithm = r.algorithm;
  slot.ended = 0;
  if (!slot.error.empty()) slot.error.clear();
  slot.state = started ? State::kRunning : State::kQueued;
  slot.issued = now;
  slot.started = started ? now : 0;
  return id;
}

FlightRecorder::Record* FlightRecorder::find(uint64_t id) {
  return id + ring_.size() >= next_ ? &ring_[id % ring_.size()] : nullptr;
}

void FlightRecorder::started(uint64_t id) {
  std::lock_guard lock(mu_);
  if (Record* r = find(id)) {
    r->state = State::kRunning;
    r->started = ticks();
  }
}

void FlightRecorder::finished(uint64_t id, std::string_view error) {
  const uint64_t now = ticks();
  std::lock_guard lock(mu_);
  if (Record* r = find(id)) {
    r->state = error.empty() ? State::kDone : State::kFailed;
    r->ended = now;
    if (!error.empty() || !r->error.empty()) r->error = error;
  }
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
  std::lock_guard lock(mu_);
  std::string s = detail::concat("{\"job\": \"", json_escape(id_.job), "\", \"comm\": \"",
                                 json_escape(id_.comm), "\", \"rank\": ", id_.rank, ", \"size\": ",
                                 id_.size, ", \"host\": \"", json_escape(host), "\", \"pid\": ",
                                 ::getpid(), ", \"reason\": \"", json_escape(reason),
                                 "\", \"dumped_us\": ", now_us(), ", \"ops\": [");
  const uint64_t first = next_ > ring_.size() ? next_ - ring_.size() : 0;
  for (uint64_t id = first; id < next_; ++id) {
    const Record& r = ring_[id % ring_.size()];
    s += detail::concat(id == first ? "\n  " : ",\n  ", "{\"seq\": ", r.seq, ", \"coll\": \"",
                        to_string(r.coll), "\", \"count\": ", r.count, ", \"dtype\": \"",
                        to_string(r.dtype), "\", \"op\": \"", to_string(r.op), "\", \"root\": ",
                        r.root, ", \"algorithm\": \"", r.algorithm, "\", \"state\": \"",
                        state_name(r.state), "\", \"issued_us\": ", scale.us(r.issued),
                        ", \"started_us\": ", scale.us(r.started), ", \"ended_us\": ",
                        scale.us(r.ended));
    // Where the newest running or failed operation was blocked.
    if ((r.state == State::kRunning || r.state == State::kFailed) && id + 1 == next_) {
      s += detail::concat(", \"step\": \"", json_escape(step), "\", \"waiting_for\": [");
      for (size_t i = 0; i < peers.size(); ++i) s += detail::concat(i ? ", " : "", peers[i]);
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
  std::lock_guard lock(mu_);
  std::string s;
  const uint64_t keep = std::min<uint64_t>(n, ring_.size());
  const uint64_t first = next_ > keep ? next_ - keep : 0;
  for (uint64_t id = first; id < next_; ++id) {
    const Record& r = ring_[id % ring_.size()];
    s += detail::concat("  #", r.seq, " ", to_string(r.coll), " count ", r.count, " ",
                        to_string(r.dtype), " ", r.algorithm, ": ", state_name(r.state),
                        r.ended && r.started
                            ? detail::concat(" in ", scale.us(r.ended) - scale.us(r.started),
                                             " us")
                            : std::string(),
                        "\n");
  }
  return s;
}

std::string FlightRecorder::dump_to_dir(const std::string& reason) {
  const auto dir = kFrDir.get_if_set();
  if (!dir) return {};
  const std::string path = detail::concat(*dir, "/chorus-fr-", id_.job, "-", id_.comm, "-r", id_.rank, ".json");
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
