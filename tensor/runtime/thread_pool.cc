// The tensor thread team: spin briefly, then sleep on a futex (see thread_pool.h).
//
// Vocabulary: a "job" is one run() call; "generation" counts jobs (the workers' futex word);
// the "claim" word holds (generation, tasks not yet claimed); "unfinished" counts the job's tasks
// not yet done (the caller's futex word). Tasks are claimed, not assigned: the caller claims
// too, so when a worker is not running (its core lent to another process) the caller does the
// whole job itself instead of waiting for it. The caller waits only for tasks already claimed.
#include "runtime/thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/futex.h"

namespace chorus::tensor {
namespace {

const IntKnob kThreadsKnob{
    "CHORUS_TENSOR_THREADS", 0,
    "threads for tensor kernels and GEMM (0 = all cores of the affinity mask)"};
const IntKnob kSpinKnob{"CHORUS_TENSOR_SPIN_US", 50,
                        "microseconds a tensor thread spins for work before it sleeps (futex)"};

thread_local bool tl_in_task = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  futex::wait(word, expected, nullptr, futex::Scope::kProcess);
}
void futex_wake_all(std::atomic<uint32_t>& word) { futex::wake_all(word, futex::Scope::kProcess); }

// Spins until done() or `budget` has passed; returns done() at the end.
template <class Pred>
bool spin_until(Pred done, std::chrono::microseconds budget) {
  for (int i = 0; i < 256; ++i) {
    if (done()) return true;
    cpu_relax();
  }
  const auto end = std::chrono::steady_clock::now() + budget;
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
  }
  return done();
}

class Pool {
 public:
  explicit Pool(int n)
      : n_(n), spin_(std::chrono::microseconds(std::max<int64_t>(0, kSpinKnob.get()))) {
    for (int w = 1; w < n_; ++w) threads_.emplace_back([this] { worker(); });
  }
  ~Pool() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(generation_);
    for (auto& t : threads_) t.join();
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  int size() const { return n_; }

  void run(int tasks, TaskRef fn) {
    std::unique_lock lock(busy_, std::try_to_lock);
    if (n_ == 1 || tasks <= 1 || tl_in_task || !lock.owns_lock()) {
      run_inline(tasks, fn);
      return;
    }
    // Publish: the job first, then the claim word, then the generation workers wait on.
    const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
    job_fn_.store(&fn, std::memory_order_relaxed);
    job_tasks_.store(tasks, std::memory_order_relaxed);
    unfinished_.store(static_cast<uint32_t>(tasks), std::memory_order_relaxed);
    claim_.store(uint64_t{gen} << 32 | static_cast<uint32_t>(tasks), std::memory_order_release);
    generation_.store(gen, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(generation_);
    tl_in_task = true;
    work(gen);
    tl_in_task = false;
    // Wait even when a task failed: the workers may still be running tasks that use fn.
    auto all_done = [this] { return unfinished_.load(std::memory_order_acquire) == 0; };
    if (!spin_until(all_done, spin_)) {
      caller_sleeping_.store(1, std::memory_order_seq_cst);
      for (uint32_t u; (u = unfinished_.load(std::memory_order_seq_cst)) != 0;)
        futex_wait(unfinished_, u);
      caller_sleeping_.store(0, std::memory_order_relaxed);
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

  static void run_inline(int tasks, TaskRef fn) {
    struct Restore {
      bool was = tl_in_task;
      ~Restore() { tl_in_task = was; }
    } restore;
    tl_in_task = true;
    for (int t = 0; t < tasks; ++t) fn(t);
  }

 private:
  // Claims and runs tasks of job `gen` until none is left unclaimed. Whether a task is left is
  // decided by the claim word alone: the job's function and task count are read only after a
  // claim succeeded, when they are this job's (its caller is still waiting for the claimed task,
  // so it cannot have published the next job). Deciding from a task count read before the claim
  // let a thread holding the previous job's exhausted claim word (generation G, next = n) read
  // the next job's larger count before that job's claim word was stored, claim "task n" of job G,
  // and run the next job's task n, which that job then ran again.
  void work(uint32_t gen) {
    while (true) {
      uint64_t c = claim_.load(std::memory_order_acquire);
      if (static_cast<uint32_t>(c >> 32) != gen) return;
      const auto left = static_cast<uint32_t>(c);
      if (left == 0) return;
      if (!claim_.compare_exchange_weak(c, c - 1, std::memory_order_acq_rel)) continue;
      const TaskRef* fn = job_fn_.load(std::memory_order_relaxed);
      const int idx = job_tasks_.load(std::memory_order_relaxed) - static_cast<int>(left);
      try {
        (*fn)(idx);
      } catch (...) {
        // Kept for the caller to rethrow (the first one wins); the job still completes.
        std::lock_guard lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      if (unfinished_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
          caller_sleeping_.load(std::memory_order_seq_cst) != 0)
        futex_wake_all(unfinished_);
    }
  }

  void worker() {
    tl_in_task = true;
    uint32_t seen = 0;
    while (true) {
      auto published = [&] { return generation_.load(std::memory_order_acquire) != seen; };
      if (!spin_until(published, spin_)) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        while (generation_.load(std::memory_order_seq_cst) == seen) futex_wait(generation_, seen);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_relaxed)) return;
      work(seen);
    }
  }

  const int n_;
  const std::chrono::microseconds spin_;
  std::vector<std::thread> threads_;
  std::mutex busy_;  // held by the thread whose job the team is running
  // The current job: (generation << 32) | tasks not yet claimed; tasks not yet finished.
  alignas(64) std::atomic<uint64_t> claim_{0};
  alignas(64) std::atomic<uint32_t> unfinished_{0};
  std::atomic<uint32_t> caller_sleeping_{0};
  alignas(64) std::atomic<uint32_t> generation_{0};
  std::atomic<uint32_t> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::atomic<const TaskRef*> job_fn_{nullptr};
  std::atomic<int> job_tasks_{0};
  std::mutex error_mutex_;
  std::exception_ptr error_;  // a task's exception, rethrown by run() (read after all done)
};

int default_threads() {
  const int64_t want = kThreadsKnob.get();
  if (want > 0) return static_cast<int>(want);
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::mutex g_pool_mutex;  // guards replacing the pool (set_pool_threads)

// Set in a child process by fork: the team's threads did not come along (only the forking thread
// does), so the child's first use starts a new team of the same size. The old one is leaked: its
// destructor would join threads that do not exist in this process.
std::atomic<bool> g_forked{false};

std::unique_ptr<Pool>& pool_slot() {
  static std::unique_ptr<Pool> pool = [] {
    pthread_atfork(nullptr, nullptr, [] { g_forked.store(true, std::memory_order_relaxed); });
    return std::make_unique<Pool>(default_threads());
  }();
  if (g_forked.load(std::memory_order_relaxed)) [[unlikely]] {
    std::lock_guard lock(g_pool_mutex);
    if (g_forked.exchange(false)) {
      const int n = pool->size();
      (void)pool.release();
      pool = std::make_unique<Pool>(n);
    }
  }
  return pool;
}

}  // namespace

int pool_threads() { return pool_slot()->size(); }

void set_pool_threads(int n) {
  CHORUS_ARG_CHECK(n >= 1, "set_num_threads(", n, ")");
  auto& slot = pool_slot();
  std::lock_guard lock(g_pool_mutex);
  if (slot->size() == n) return;
  slot.reset();
  slot = std::make_unique<Pool>(n);
}

void pool_run(int tasks, TaskRef fn) { pool_slot()->run(tasks, fn); }

bool in_pool_task() { return tl_in_task; }

}  // namespace chorus::tensor
