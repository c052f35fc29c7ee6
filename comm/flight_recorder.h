// chorus — the flight recorder: the last N operations of a communicator (what, how big, which
// algorithm, when issued / started / ended, how it ended, and for the one in progress the step
// and the peers it waits for). Dumped as JSON on a timeout or failure (to CHORUS_FR_DIR, with a
// short summary on stderr), on demand through Communicator::flight_recorder_json(), or for every
// live communicator when the process receives CHORUS_FR_SIGNAL. tools/chorus-fr merges the dumps
// of all ranks into "who waits for whom".
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
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
    int root = -1;               // rooted collectives; the peer for send/recv
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
  // An operation issued while every entry still holds one in flight (queued or running) is not
  // recorded: the oldest unfinished operations are the ones a hang is about. It gets kUnrecorded,
  // which the other calls ignore, and the dumps count it.
  uint64_t issued(const Record& r, bool started = false);
  void started(uint64_t id);
  void finished(uint64_t id, std::string_view error);  // empty error = success
  static constexpr uint64_t kUnrecorded = UINT64_MAX;

  // The exchange publishes where it is blocked here.
  Exchange::Waiting* waiting() { return &waiting_; }

  // One JSON document: identity, why it was dumped, the newest sequence number issued, how many
  // operations went unrecorded, and every record, oldest first.
  std::string json(const std::string& reason);
  // The last `n` records as text lines (for stderr).
  std::string summary(size_t n);
  // Writes json(reason) to $CHORUS_FR_DIR/chorus-fr-<job>-<comm>-r<rank>.json when the knob is
  // set; returns the path or an empty string.
  std::string dump_to_dir(const std::string& reason);

  // Dumps every live recorder of this process (the CHORUS_FR_SIGNAL handler's work).
  static void dump_all(const std::string& reason);

 private:
  // Every operation writes its entry two or three times on the latency path of small collectives,
  // so writing takes no lock and no read-modify-write: each entry is a sequence lock. Its writers
  // never overlap: issued() runs on the issuing thread, started() and finished() on the thread
  // that runs the operation after it was issued, and issued() reuses an entry only once its
  // operation has finished (the acquire of `version` orders it after that finished()). A dump
  // copies an entry and keeps the copy if `version` was even and unchanged around it. The fields
  // are relaxed atomics, so a copy racing a writer is torn data the version check throws away,
  // never undefined behaviour. Error texts are rare and live beside the entries under a mutex.
  struct Entry {
    std::atomic<uint32_t> version{0};  // odd while being written
    std::atomic<uint64_t> id{kUnrecorded};
    std::atomic<int64_t> seq{0};
    std::atomic<uint64_t> count{0};
    std::atomic<int32_t> root{-1};
    std::atomic<uint8_t> coll{0}, dtype{0}, op{0}, state{0};
    std::atomic<const char*> algorithm{nullptr};
    std::atomic<uint32_t> algorithm_len{0};
    std::atomic<bool> has_error{false};
    std::atomic<uint64_t> issued{0}, started{0}, ended{0};
  };
  template <class Write>
  static void write(Entry& e, Write&& w);
  // A consistent copy of `e` (false: never written). `id` is the operation's recorder id.
  bool snapshot(const Entry& e, Record& out, uint64_t& id);
  Entry* entry_of(uint64_t id);  // nullptr for kUnrecorded or an entry since reused
  // Consistent copies of the recorded operations, oldest first.
  std::vector<std::pair<uint64_t, Record>> snapshots();
  // The live recorders of this process, for the signal-driven dump (flight_recorder_dump.cc): a
  // recorder joins at construction (installing the CHORUS_FR_SIGNAL handler when that is set)
  // and leaves at destruction.
  static void enlist(FlightRecorder* r);
  static void delist(FlightRecorder* r);

  static uint64_t ticks() {
#ifdef CHORUS_FR_TSC
    return __rdtsc();
#else
    return clock_ticks();
#endif
  }
  static uint64_t clock_ticks();  // CLOCK_REALTIME microseconds
  static int64_t now_us();        // the same, signed
  // How ticks() values become CLOCK_REALTIME microseconds: measured when a dump is made.
  struct TickScale {
    int64_t base_us = 0;
    uint64_t base_ticks = 0;
    double ticks_per_us = 1;
    int64_t us(uint64_t t) const;  // 0 stays 0
  };
  TickScale tick_scale() const;

  Identity id_;
  int64_t base_us_;        // CLOCK_REALTIME microseconds at construction ...
  uint64_t base_ticks_;    // ... and ticks() then
  const size_t capacity_;  // a power of two: an id's entry is id & (capacity_ - 1)
  std::unique_ptr<Entry[]> entries_;
  std::atomic<uint64_t> next_{0};        // ids given so far (written by the issuing thread only)
  std::atomic<uint64_t> unrecorded_{0};  // operations issued while every entry was in flight
  std::atomic<int64_t> last_seq_{-1};    // seq of the newest operation issued, recorded or not
  std::mutex errors_mu_;
  // Per entry: (id, text) of its last failed operation, shown while the entry still holds that id.
  std::vector<std::pair<uint64_t, std::string>> errors_;
  Exchange::Waiting waiting_;
};

}  // namespace chorus
