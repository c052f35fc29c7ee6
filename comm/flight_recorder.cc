#include "flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <thread>

#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/log.h"
#include "transport/futex.h"

namespace chorus {
namespace {

const IntKnob kFrEntries{"CHORUS_FR_ENTRIES", 256,
                         "operations each communicator's flight recorder keeps (1 to 2^20, rounded "
                         "up to a power of two)"};

size_t entry_count(size_t capacity) {
  if (capacity == 0) {
    const int64_t v = kFrEntries.get();
    CHORUS_ARG_CHECK(v >= 1 && v <= (1 << 20), "CHORUS_FR_ENTRIES=", v,
                     " must be between 1 and 1048576");
    capacity = static_cast<size_t>(v);
  }
  return std::bit_ceil(capacity);
}
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
      capacity_(entry_count(capacity)),
      entries_(new Entry[capacity_]), errors_(capacity_, {kUnrecorded, std::string()}) {
  install_signal();
  std::lock_guard lock(g_mu);
  live().insert(this);
}

FlightRecorder::~FlightRecorder() {
  std::lock_guard lock(g_mu);
  live().erase(this);
}

template <class Write>
void FlightRecorder::write(Entry& e, Write&& w) {
  const uint32_t v = e.version.load(std::memory_order_relaxed);
  e.version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);  // odd before any field changes
  w();
  e.version.store(v + 2, std::memory_order_release);
}

uint64_t FlightRecorder::issued(const Record& r, bool started) {
  const uint64_t now = ticks();
  last_seq_.store(r.seq, std::memory_order_relaxed);
  const uint64_t id = next_.load(std::memory_order_relaxed);
  Entry& e = entries_[id & (capacity_ - 1)];
  // An even version read with acquire orders this after the entry's last write; odd, its runner
  // is writing it now.
  const bool writing = e.version.load(std::memory_order_acquire) & 1;
  const auto state = static_cast<State>(e.state.load(std::memory_order_relaxed));
  if (writing || (e.id.load(std::memory_order_relaxed) != kUnrecorded && state != State::kDone &&
                  state != State::kFailed)) [[unlikely]] {
    unrecorded_.fetch_add(1, std::memory_order_relaxed);
    return kUnrecorded;
  }
  write(e, [&] {
    e.id.store(id, std::memory_order_relaxed);
    e.seq.store(r.seq, std::memory_order_relaxed);
    e.count.store(r.count, std::memory_order_relaxed);
    e.root.store(r.root, std::memory_order_relaxed);
    e.coll.store(static_cast<uint8_t>(r.coll), std::memory_order_relaxed);
    e.dtype.store(static_cast<uint8_t>(r.dtype), std::memory_order_relaxed);
    e.op.store(static_cast<uint8_t>(r.op), std::memory_order_relaxed);
    e.state.store(static_cast<uint8_t>(started ? State::kRunning : State::kQueued),
                  std::memory_order_relaxed);
    e.algorithm.store(r.algorithm.data(), std::memory_order_relaxed);
    e.algorithm_len.store(static_cast<uint32_t>(r.algorithm.size()), std::memory_order_relaxed);
    e.has_error.store(false, std::memory_order_relaxed);
    e.issued.store(now, std::memory_order_relaxed);
    e.started.store(started ? now : 0, std::memory_order_relaxed);
    e.ended.store(0, std::memory_order_relaxed);
  });
  next_.store(id + 1, std::memory_order_release);
  return id;
}

FlightRecorder::Entry* FlightRecorder::entry_of(uint64_t id) {
  if (id == kUnrecorded) return nullptr;
  Entry& e = entries_[id & (capacity_ - 1)];
  return e.id.load(std::memory_order_relaxed) == id ? &e : nullptr;
}

void FlightRecorder::started(uint64_t id) {
  if (Entry* e = entry_of(id)) {
    const uint64_t now = ticks();
    write(*e, [&] {
      e->state.store(static_cast<uint8_t>(State::kRunning), std::memory_order_relaxed);
      e->started.store(now, std::memory_order_relaxed);
    });
  }
}

void FlightRecorder::finished(uint64_t id, std::string_view error) {
  const uint64_t now = ticks();
  Entry* e = entry_of(id);
  if (e == nullptr) return;
  if (!error.empty()) [[unlikely]] {
    std::lock_guard lock(errors_mu_);
    errors_[id & (capacity_ - 1)] = {id, std::string(error)};
  }
  write(*e, [&] {
    e->state.store(static_cast<uint8_t>(error.empty() ? State::kDone : State::kFailed),
                   std::memory_order_relaxed);
    e->ended.store(now, std::memory_order_relaxed);
    if (!error.empty()) e->has_error.store(true, std::memory_order_relaxed);
  });
}

bool FlightRecorder::snapshot(const Entry& e, Record& out, uint64_t& id) {
  // A writer holds an entry for a few stores; one descheduled mid-write gets a few yields to
  // finish, after which the copy is taken as it stands.
  for (int tries = 0;; ++tries) {
    const uint32_t v = e.version.load(std::memory_order_acquire);
    id = e.id.load(std::memory_order_relaxed);
    out.seq = e.seq.load(std::memory_order_relaxed);
    out.count = e.count.load(std::memory_order_relaxed);
    out.root = e.root.load(std::memory_order_relaxed);
    out.coll = static_cast<Collective>(e.coll.load(std::memory_order_relaxed));
    out.dtype = static_cast<DataType>(e.dtype.load(std::memory_order_relaxed));
    out.op = static_cast<ReduceOp>(e.op.load(std::memory_order_relaxed));
    out.state = static_cast<State>(e.state.load(std::memory_order_relaxed));
    const char* name = e.algorithm.load(std::memory_order_relaxed);
    const uint32_t len = e.algorithm_len.load(std::memory_order_relaxed);
    out.issued = e.issued.load(std::memory_order_relaxed);
    out.started = e.started.load(std::memory_order_relaxed);
    out.ended = e.ended.load(std::memory_order_relaxed);
    const bool has_error = e.has_error.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    const bool stable = (v & 1) == 0 && e.version.load(std::memory_order_relaxed) == v;
    if (stable || tries >= 1000) {
      if (id == kUnrecorded || (!stable && name == nullptr)) return false;
      out.algorithm = name != nullptr ? std::string_view(name, len) : std::string_view();
      out.error.clear();
      if (has_error) {
        std::lock_guard lock(errors_mu_);
        const auto& [owner, text] = errors_[id & (capacity_ - 1)];
        if (owner == id) out.error = text;
      }
      return true;
    }
    if (tries < 64) transport::cpu_relax();
    else std::this_thread::yield();
  }
}

std::vector<std::pair<uint64_t, FlightRecorder::Record>> FlightRecorder::snapshots() {
  const uint64_t next = next_.load(std::memory_order_acquire);
  const uint64_t first = next > capacity_ ? next - capacity_ : 0;
  std::vector<std::pair<uint64_t, Record>> out;
  out.reserve(static_cast<size_t>(next - first));
  for (uint64_t i = first; i < next; ++i) {
    std::pair<uint64_t, Record> r;
    // An entry still holding an older operation (the newer one was not recorded) keeps it.
    if (snapshot(entries_[i & (capacity_ - 1)], r.second, r.first)) out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  return out;
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
    if (ops[i].second.state == State::kRunning) blocked = i;
    else if (ops[i].second.state == State::kFailed &&
             (blocked == ops.size() || ops[blocked].second.state != State::kRunning))
      blocked = i;
  }
  std::string s = detail::concat(
      "{\"job\": \"", json_escape(id_.job), "\", \"comm\": \"", json_escape(id_.comm),
      "\", \"rank\": ", id_.rank, ", \"size\": ", id_.size, ", \"host\": \"", json_escape(host),
      "\", \"pid\": ", ::getpid(), ", \"reason\": \"", json_escape(reason), "\", \"dumped_us\": ",
      now_us(), ", \"last_issued_seq\": ", last_seq_.load(std::memory_order_relaxed),
      ", \"unrecorded\": ", unrecorded_.load(std::memory_order_relaxed), ", \"ops\": [");
  for (size_t i = 0; i < ops.size(); ++i) {
    const Record& r = ops[i].second;
    s += detail::concat(i == 0 ? "\n  " : ",\n  ", "{\"seq\": ", r.seq, ", \"coll\": \"",
                        to_string(r.coll), "\", \"count\": ", r.count, ", \"dtype\": \"",
                        to_string(r.dtype), "\", \"op\": \"", to_string(r.op), "\", \"root\": ",
                        r.root, ", \"algorithm\": \"", r.algorithm, "\", \"state\": \"",
                        state_name(r.state), "\", \"issued_us\": ", scale.us(r.issued),
                        ", \"started_us\": ", scale.us(r.started), ", \"ended_us\": ",
                        scale.us(r.ended), ", \"record\": ", ops[i].first);
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
                            ? detail::concat(" in ", scale.us(r.ended) - scale.us(r.started),
                                             " us")
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
