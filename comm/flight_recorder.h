// chorus — the flight recorder: the last N operations of a communicator (what, how big, which
// algorithm, when issued / started / ended, how it ended, and for the one in progress the step
// and the peers it waits for). Dumped as JSON on a timeout or failure (to CHORUS_FR_DIR, with a
// short summary on stderr), on demand through Communicator::flight_recorder_json(), or for every
// live communicator when the process receives CHORUS_FR_SIGNAL. tools/chorus-fr merges the dumps
// of all ranks into "who waits for whom".
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/communicator.h"
#include "exchange.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define CHORUS_FR_TSC 1
#endif

namespace chorus {

class FlightRecorder {
 public:
  enum class State : uint8_t { kQueued, kRunning, kDone, kFailed };
  struct Record {
    int64_t seq = 0;
    Collective coll = Collective::kAllReduce;
    size_t count = 0;
    DataType dtype = DataType::kF32;
    ReduceOp op = ReduceOp::kSum;
    int root = -1;  // rooted collectives; the peer for send/recv
    std::string_view algorithm;  // a static name ("ring", ...)
    State state = State::kQueued;
    // Clock ticks (ticks()); json() and summary() turn them into CLOCK_REALTIME microseconds.
    uint64_t issued = 0, started = 0, ended = 0;
    std::string error;
  };

  struct Identity {
    std::string job, comm;
    int rank = 0, size = 1;
  };

  FlightRecorder(Identity id, size_t capacity);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Returns an id for the other calls. `started`: it runs right away (one call instead of two).
  uint64_t issued(const Record& r, bool started = false);
  void started(uint64_t id);
  void finished(uint64_t id, std::string_view error);  // empty error = success

  // The exchange publishes where it is blocked here.
  Exchange::Waiting* waiting() { return &waiting_; }

  // One JSON document: identity, why it was dumped, and every record, oldest first.
  std::string json(const std::string& reason);
  // The last `n` records as text lines (for stderr).
  std::string summary(size_t n);
  // Writes json(reason) to $CHORUS_FR_DIR/chorus-fr-<job>-<comm>-r<rank>.json when the knob is
  // set; returns the path or an empty string.
  std::string dump_to_dir(const std::string& reason);

  // Dumps every live recorder of this process (the CHORUS_FR_SIGNAL handler's work).
  static void dump_all(const std::string& reason);

 private:
  Record* find(uint64_t id);  // nullptr once overwritten

  // Every operation takes the lock twice and reads the clock twice, on the latency path of small
  // collectives: so the lock is a spin lock (writers are the one thread running operations and
  // the one issuing them; a dump holds it briefly) and the clock is the time-stamp counter where
  // there is one (a few ns against ~20 for clock_gettime), converted when a dump is made.
  class SpinLock {
   public:
    void lock() {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      lock_contended();
    }
    void unlock() { locked_.store(false, std::memory_order_release); }

   private:
    void lock_contended();
    std::atomic<bool> locked_{false};
  };
  static uint64_t ticks() {
#ifdef CHORUS_FR_TSC
    return __rdtsc();
#else
    return clock_ticks();
#endif
  }
  static uint64_t clock_ticks();  // CLOCK_REALTIME microseconds
  // How ticks() values become CLOCK_REALTIME microseconds: measured when a dump is made.
  struct TickScale {
    int64_t base_us = 0;
    uint64_t base_ticks = 0;
    double ticks_per_us = 1;
    int64_t us(uint64_t t) const;  // 0 stays 0
  };
  TickScale tick_scale() const;

  Identity id_;
  SpinLock mu_;
  int64_t base_us_;      // CLOCK_REALTIME microseconds at construction ...
  uint64_t base_ticks_;  // ... and ticks() then
  std::vector<Record> ring_;
  uint64_t next_ = 0;
  Exchange::Waiting waiting_;
};

}  // namespace chorus
