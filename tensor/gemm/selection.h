// Internal: choosing a GEMM kernel by measurement, the one mechanism of the f32 backend (gemm.cc)
// and the autocast bf16 method (bf16_selection.cc), each chosen per shape class
// (gemm/shape_class.h).
//
//   candidates   named, in preference order, each available or not;
//   timing       one round of a candidate (seconds per call), run in alternating rounds so a
//                burst of load from other processes hits all of them alike; round 0 warms up
//                (JIT, page faults) and is not kept, each keeps its best later round;
//   the rule     the first candidate within a margin of the fastest (first_within_margin);
//   the cache    ChoiceCache: the index chosen per shape class, decided once on first use, and
//                where it came from (measured, forced by a knob, set, pinned by rule);
//   agreement    the decision is a string (gemm.h: gemm_backend(), bf16_gemm_mode()) that ranks
//                which must compute alike copy from rank 0 (parallel/common/kernel_agreement.cc);
//                the deterministic mode pins by rule instead of timing (pin_gemm_choices).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace chorus::tensor::gemm_impl {

// The selection rule: given each candidate's time in preference order (a negative time: not a
// candidate), the first one within `margin` (relative) of the fastest. Two candidates within
// noise of each other then give the same choice in every run instead of whichever a noisy round
// favoured. seconds.size() when there is no candidate.
inline size_t first_within_margin(const std::vector<double>& seconds, double margin = 0.03) {
  double fastest = -1;
  for (double s : seconds)
    if (s >= 0 && (fastest < 0 || s < fastest)) fastest = s;
  for (size_t i = 0; i < seconds.size(); ++i)
    if (seconds[i] >= 0 && seconds[i] <= fastest * (1 + margin)) return i;
  return seconds.size();  // no candidate
}

struct Candidate {
  std::string name;
  bool available = false;
};

// The best round's seconds of every available candidate (-1 for the others): `rounds` rounds
// after the warm-up round, alternating between the candidates in order. `selection` names what
// is chosen ("f32 gemm nt.large", "bf16 gemm nt.large") for the test seam below.
std::vector<double> time_candidates(const std::string& selection,
                                    const std::vector<Candidate>& candidates, int rounds,
                                    const std::function<double(size_t candidate)>& round);

// A round for time_candidates that runs candidate w's `call` about `round_seconds` long, in
// seconds per call: its first round (time_candidates' warm-up: JIT, page faults) runs one call,
// which sizes the later ones (1 to 128 calls), so a short product is not lost in the clock's
// noise. `candidates` is their count.
std::function<double(size_t candidate)> repeated_round(size_t candidates, double round_seconds,
                                                       std::function<void(size_t candidate)> call);

// Before any class is timed, the heap as a training step leaves it (settle_the_heap), then
// `warm(c)` (two untimed calls of every candidate on class c's shape)
// for every class c left open (`fixed[c]` < 0: a plan's classes, -1 where measured); nothing
// while timings are faked. A library's scratch memory
// at the first calls of a process goes back to the system after each call (glibc's thresholds grow
// only as larger blocks are freed), so whichever class was timed first paid page faults on every
// call: oneDNN's f32 nt.large measured 106-140 GFLOP/s against 185-217 warm on an Intel Xeon with
// AVX-512, where the step runs it warm.
void warm_up_classes(std::span<const int> fixed, const std::function<void(int shape_class)>& warm);
// glibc's malloc thresholds raised as a process's first large free raises them (once per process):
// before it, a library's per-call scratch above 128 KiB is mapped and unmapped on every call,
// page faults included, which no step pays once its first large tensor has been freed. oneDNN's
// f32 nn products measured 174-192 GFLOP/s alone on an Intel Xeon with AVX-512 (one thread)
// against 207-220 in the training step or with the thresholds raised, so builtin (188-206) was
// chosen where oneDNN is 6-8% faster.
void settle_the_heap();

// How a class's products run in a training step, so that a timing runs them alike: a large
// class's product alone, its rows spread over the team (a linear layer's); a small class's one
// per team thread, all at once, each library call on its own thread (attention runs each head's
// products inside a task of the team). Timed alone over the team instead, OpenBLAS led the small
// transposed classes on an Intel Xeon with AVX-512 (2 threads: 357 against oneDNN's 328
// GFLOP/s) where in the step it ran them at 93 against oneDNN's 120.
// The products a class's timing runs at once, each on operands of its own.
int calls_at_once(int shape_class);
// Runs call(0) .. call(calls_at_once(c) - 1) as the step runs class c's products.
void run_as_in_a_step(int shape_class, const std::function<void(int call)>& call);

// The measurement and the rule together: the winner's index among `candidates` (the timings in
// `seconds`, when given). InvalidArgument when none is available.
size_t select_by_measurement(const std::string& selection, const std::vector<Candidate>& candidates,
                             int rounds, const std::function<double(size_t candidate)>& round,
                             double margin, std::vector<double>* seconds = nullptr);

// Tests only: while set, time_candidates runs no round and returns fake(selection, candidate)
// for each available candidate instead (the warm-up skipped too). Returns the previous one.
using FakeTimings = std::function<double(const std::string& selection, const std::string& name)>;
FakeTimings set_fake_timings(FakeTimings fake);

// Where a cached choice came from.
enum class ChoiceOrigin { kNone, kMeasured, kForced, kSet, kPinned };
// Its name in the logs: "measured", the forcing knob's name, "set", "pinned" or "none".
const char* origin_name(ChoiceOrigin origin, const char* knob);

// The choice per shape class (an index into the candidates of each), decided for every class at
// once on first use by `decide` (measurement where no knob forces it). Thread safe; reading a
// decided choice takes no lock, and a choice replaced later (set, pinned) is never torn.
class ChoiceCache {
 public:
  struct Decision {
    std::vector<int> choice;  // per shape class
    ChoiceOrigin origin = ChoiceOrigin::kNone;
  };
  ChoiceCache(int classes, std::function<Decision()> decide);

  // The choice of one class (deciding every class first if nothing is decided yet).
  int choice(int shape_class);
  // The whole decision (deciding first if needed).
  Decision decision();
  // Replaces the decision (set by name, measured again): `d` names every class.
  void store(const Decision& d);
  // Replaces the decision with make() unless keep(current) (both under the lock; current's
  // origin is kNone when nothing is decided yet).
  void replace_unless(const std::function<bool(const Decision&)>& keep,
                      const std::function<Decision()>& make);

 private:
  void decide_once();
  void store_locked(const Decision& d);
  Decision current_locked() const;

  const int classes_;
  std::function<Decision()> decide_;
  std::mutex mutex_;
  std::atomic<bool> decided_{false};
  std::vector<std::atomic<int>> choice_;
  ChoiceOrigin origin_ = ChoiceOrigin::kNone;  // under mutex_
};

}  // namespace chorus::tensor::gemm_impl
