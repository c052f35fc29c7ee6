// The flight recorder's record ring: entries written lock-free on the operation's path, and
// consistent copies of them for the dumps (flight_recorder_dump.cc).
#include "flight_recorder.h"

#include <time.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <thread>

#include "chorus/config.h"
#include "chorus/error.h"
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

}  // namespace

int64_t FlightRecorder::now_us() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
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
    : id_(std::move(id)),
      base_us_(now_us()),
      base_ticks_(ticks()),
      capacity_(entry_count(capacity)),
      entries_(new Entry[capacity_]),
      errors_(capacity_, {kUnrecorded, std::string()}) {
  enlist(this);
}

FlightRecorder::~FlightRecorder() { delist(this); }

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
  // is writing it now. The state is read between two reads of the version, as a dump reads an
  // entry: a state of a write still in progress (finished() storing Done, visible before its odd
  // version on a weakly ordered CPU) changes the version, and the entry is left to its runner
  // rather than written by two threads at once.
  const uint32_t v = e.version.load(std::memory_order_acquire);
  const auto state = static_cast<State>(e.state.load(std::memory_order_relaxed));
  const uint64_t held = e.id.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  const bool writing = (v & 1) != 0 || e.version.load(std::memory_order_relaxed) != v;
  if (writing || (held != kUnrecorded && state != State::kDone && state != State::kFailed))
      [[unlikely]] {
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

// An operation's times never go backwards: the cores' time-stamp counters may disagree by a
// little (rdtsc is not even ordered with the loads before it), and CLOCK_REALTIME may be set
// back, so a start or an end read earlier than the event before it takes that event's time.
void FlightRecorder::started(uint64_t id) {
  if (Entry* e = entry_of(id)) {
    const uint64_t now = std::max(ticks(), e->issued.load(std::memory_order_relaxed));
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
  const uint64_t at_least = std::max(e->started.load(std::memory_order_relaxed),
                                     e->issued.load(std::memory_order_relaxed));
  write(*e, [&] {
    e->state.store(static_cast<uint8_t>(error.empty() ? State::kDone : State::kFailed),
                   std::memory_order_relaxed);
    e->ended.store(std::max(now, at_least), std::memory_order_relaxed);
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
    if (tries < 64)
      transport::cpu_relax();
    else
      std::this_thread::yield();
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

}  // namespace chorus
