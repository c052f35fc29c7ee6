// Internal: the tensor engine's own thread team.
//
// Scheme: a fixed team of threads - 1 workers plus the calling thread. run(tasks, fn) publishes
// one job (a function reference and a task count) by bumping a generation counter; the caller
// and the workers claim tasks from an atomic counter, and the caller returns when every task
// has finished. A worker that is slow to wake (oversubscribed cores) costs nothing: the caller
// claims the tasks it would have run.
// Waiting, on both sides, is a short spin (kSpin, ~30 us: back-to-back kernels of one training
// step reuse a spinning team) followed by a futex sleep, so a team that is not in use costs no
// CPU and an oversubscribed machine (several test binaries on 2 cores) does not collapse the way
// OpenMP's default spin-waiting does.
//
// Invariants
//   - One job at a time. A run() that finds the team busy (another user thread, or a nested call
//     from inside a task) executes its tasks inline on the calling thread: no deadlock, same
//     results, since task i always computes the same thing whichever thread runs it.
//   - A task that throws does not stop the others; run() rethrows the first exception once
//     every task has finished (kernels do not throw; a library call's error check may).
//   - set_pool_threads() must not race with work on the team (call it between steps).
//   - Deterministic: the split of work into tasks depends only on the task count.
#pragma once

#include <cstdint>
#include <utility>

namespace chorus::tensor {

// A non-owning reference to a callable void(int task): what run() executes.
class TaskRef {
 public:
  template <class F>
  TaskRef(F& f) : obj_(&f), call_([](void* o, int t) { (*static_cast<F*>(o))(t); }) {}  // NOLINT
  void operator()(int task) const { call_(obj_, task); }

 private:
  void* obj_;
  void (*call_)(void*, int);
};

// The process-wide team. Size: CHORUS_TENSOR_THREADS, else the CPUs of the affinity mask.
int pool_threads();
// Resizes the team (joins and restarts the workers); n >= 1.
void set_pool_threads(int n);
// Runs fn(0) .. fn(tasks - 1), each exactly once, spread over the team; tasks <= pool_threads()
// for full parallelism (more tasks are run round-robin). Returns when all have finished.
void pool_run(int tasks, TaskRef fn);
// True on a thread currently executing a pool task (nested parallel regions run inline).
bool in_pool_task();

}  // namespace chorus::tensor
