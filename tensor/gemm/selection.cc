// Choosing a GEMM kernel by measurement: the alternating rounds and the per-class cache
// (selection.h).
#include "gemm/selection.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>

#include "chorus/error.h"
#include "runtime/thread_pool.h"

namespace chorus::tensor::gemm_impl {
namespace {

std::mutex g_fake_mutex;
FakeTimings g_fake;

FakeTimings fake_timings() {
  std::lock_guard lock(g_fake_mutex);
  return g_fake;
}

}  // namespace

std::vector<double> time_candidates(const std::string& selection,
                                    const std::vector<Candidate>& candidates, int rounds,
                                    const std::function<double(size_t candidate)>& round) {
  std::vector<double> best(candidates.size(), -1);
  if (const FakeTimings fake = fake_timings()) {
    for (size_t i = 0; i < candidates.size(); ++i)
      if (candidates[i].available) best[i] = fake(selection, candidates[i].name);
    return best;
  }
  for (int r = 0; r <= rounds; ++r)  // round 0 warms up
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (!candidates[i].available) continue;
      const double s = round(i);
      if (r > 0) best[i] = best[i] < 0 ? s : std::min(best[i], s);
    }
  return best;
}

void settle_the_heap() {
#ifdef __GLIBC__
  // glibc serves a block above its mmap threshold (128 KiB at first) by mmap and unmaps it when
  // freed, and gives the top of its heap back beyond the trim threshold; it raises both once a
  // mapped block is freed (to that block's size, and twice it), for blocks up to 32 MiB with
  // their header. A block freed just under that puts the process where a training step's first
  // large free puts it. (Through a volatile pointer: a compiler may drop an unused pair.)
  static const bool settled = [] {
    void* volatile block = std::malloc((size_t{32} << 20) - 8192);
    std::free(block);
    return true;
  }();
  (void)settled;
#endif
}

void warm_up_classes(std::span<const int> fixed, const std::function<void(int)>& warm) {
  if (fake_timings()) return;
  settle_the_heap();
  for (size_t c = 0; c < fixed.size(); ++c)
    if (fixed[c] < 0) warm(static_cast<int>(c));
}

int calls_at_once(int shape_class) { return shape_class % 2 ? 1 : std::max(1, pool_threads()); }

void run_as_in_a_step(int shape_class, const std::function<void(int)>& call) {
  const int calls = calls_at_once(shape_class);
  if (calls == 1) {
    call(0);
    return;
  }
  auto task = [&](int t) { call(t); };
  pool_run(calls, TaskRef(task));
}

size_t select_by_measurement(const std::string& selection, const std::vector<Candidate>& candidates,
                             int rounds, const std::function<double(size_t candidate)>& round,
                             double margin, std::vector<double>* seconds) {
  std::vector<double> t = time_candidates(selection, candidates, rounds, round);
  const size_t winner = first_within_margin(t, margin);
  CHORUS_ARG_CHECK(winner < candidates.size(), selection, ": no candidate is available");
  if (seconds) *seconds = std::move(t);
  return winner;
}

FakeTimings set_fake_timings(FakeTimings fake) {
  std::lock_guard lock(g_fake_mutex);
  std::swap(g_fake, fake);
  return fake;
}

ChoiceCache::ChoiceCache(int classes, std::function<Decision()> decide)
    : classes_(classes), decide_(std::move(decide)), choice_(static_cast<size_t>(classes)) {}

void ChoiceCache::decide_once() {
  if (decided_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mutex_);
  if (!decided_.load(std::memory_order_relaxed)) store_locked(decide_());
}

int ChoiceCache::choice(int shape_class) {
  decide_once();
  return choice_[static_cast<size_t>(shape_class)].load(std::memory_order_acquire);
}

ChoiceCache::Decision ChoiceCache::decision() {
  decide_once();
  std::lock_guard lock(mutex_);
  return current_locked();
}

void ChoiceCache::store(const Decision& d) {
  std::lock_guard lock(mutex_);
  store_locked(d);
}

void ChoiceCache::replace_unless(const std::function<bool(const Decision&)>& keep,
                                 const std::function<Decision()>& make) {
  std::lock_guard lock(mutex_);
  if (keep(current_locked())) return;
  store_locked(make());
}

void ChoiceCache::store_locked(const Decision& d) {
  CHORUS_CHECK(static_cast<int>(d.choice.size()) == classes_, "ChoiceCache: ", d.choice.size(),
               " choices for ", classes_, " shape classes");
  for (int c = 0; c < classes_; ++c)
    choice_[static_cast<size_t>(c)].store(d.choice[static_cast<size_t>(c)],
                                          std::memory_order_release);
  origin_ = d.origin;
  decided_.store(true, std::memory_order_release);
}

ChoiceCache::Decision ChoiceCache::current_locked() const {
  Decision d;
  if (!decided_.load(std::memory_order_relaxed)) return d;
  for (const auto& c : choice_) d.choice.push_back(c.load(std::memory_order_relaxed));
  d.origin = origin_;
  return d;
}

std::function<double(size_t)> repeated_round(size_t candidates, double round_seconds,
                                             std::function<void(size_t)> call) {
  using Clock = std::chrono::steady_clock;
  auto iters = std::make_shared<std::vector<int>>(candidates, 0);  // 0 until the warm-up
  return [iters, round_seconds, call = std::move(call)](size_t w) {
    int& n = (*iters)[w];
    const auto t0 = Clock::now();
    if (n == 0) {
      call(w);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      n = std::clamp(static_cast<int>(round_seconds / std::max(s, 1e-7)), 1, 128);
      return s;
    }
    for (int i = 0; i < n; ++i) call(w);
    return std::chrono::duration<double>(Clock::now() - t0).count() / n;
  };
}

const char* origin_name(ChoiceOrigin origin, const char* knob) {
  switch (origin) {
    case ChoiceOrigin::kMeasured:
      return "measured";
    case ChoiceOrigin::kForced:
      return knob;
    case ChoiceOrigin::kSet:
      return "set";
    case ChoiceOrigin::kPinned:
      return "pinned";
    case ChoiceOrigin::kNone:
      break;
  }
  return "none";
}

}  // namespace chorus::tensor::gemm_impl
