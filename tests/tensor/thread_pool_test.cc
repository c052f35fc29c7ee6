// The tensor thread team (tensor/runtime/thread_pool.h): every task runs exactly once, nested and
// concurrent callers run inline, resizing works, and parallel_for covers its range.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cpu/simd.h"
#include "runtime/thread_pool.h"

namespace chorus::tensor {
namespace {

// Restores the team size a test changed.
class TeamSize {
 public:
  explicit TeamSize(int n) : saved_(pool_threads()) { set_pool_threads(n); }
  ~TeamSize() { set_pool_threads(saved_); }

 private:
  int saved_;
};

// Runs `reps` jobs of `tasks` tasks on the current team; fails naming `where` and the task when
// one did not run exactly once.
void expect_each_task_once(int tasks, int reps, const std::string& where) {
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(tasks));
    auto fn = [&](int t) { hits[static_cast<size_t>(t)].fetch_add(1); };
    pool_run(tasks, TaskRef(fn));
    for (int t = 0; t < tasks; ++t)
      ASSERT_EQ(hits[static_cast<size_t>(t)].load(), 1)
          << where << " tasks " << tasks << " rep " << rep << " task " << t;
  }
}

TEST(ThreadPool, EveryTaskRunsOnce) {
  for (int team : {1, 2, 3, 5}) {
    TeamSize size(team);
    for (int tasks : {1, 2, 3, 7, 64}) {
      expect_each_task_once(tasks, 50, "team " + std::to_string(team));
      if (HasFatalFailure()) return;
    }
  }
}

// A worker that comes late to a job the caller has already finished must not claim a task of the
// next one. The window is the caller publishing the next job: when the task count grows (a few,
// then more), a worker holding the finished job's claim word could read the new, larger count and
// run a task the new job then runs again. It is open for a few instructions, so the test makes
// thousands of such transitions, each on a new team (threads still starting up are the late ones
// most often); before the claim was fixed it failed a few times in every thousand teams.
TEST(ThreadPool, ALateWorkerNeverRunsTheNextJobsTaskTwice) {
  for (int round = 0; round < 1500; ++round) {
    for (int team : {2, 3, 5}) {
      TeamSize size(team);
      for (int tasks : {2, 3, 7, 64}) {
        expect_each_task_once(tasks, 3,
                              "round " + std::to_string(round) + " team " + std::to_string(team));
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(ThreadPool, NestedRunsInline) {
  TeamSize size(3);
  std::atomic<int> inner{0};
  auto outer_fn = [&](int) {
    EXPECT_TRUE(in_pool_task());
    const auto self = std::this_thread::get_id();
    auto inner_fn = [&](int) {
      EXPECT_EQ(std::this_thread::get_id(), self);  // inline on the task's own thread
      inner.fetch_add(1);
    };
    pool_run(4, TaskRef(inner_fn));
  };
  pool_run(3, TaskRef(outer_fn));
  EXPECT_EQ(inner.load(), 12);
  EXPECT_FALSE(in_pool_task());
}

TEST(ThreadPool, ConcurrentCallersBothComplete) {
  // Two user threads share the team: one gets it, the other runs its job inline.
  TeamSize size(2);
  std::atomic<int64_t> total{0};
  auto caller = [&] {
    for (int rep = 0; rep < 200; ++rep) {
      parallel_for(1 << 16, 1, [&](int64_t b, int64_t e, int) { total.fetch_add(e - b); });
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), int64_t{2} * 200 * (1 << 16));
}

TEST(ThreadPool, ParallelForCoversTheRangeInContiguousPieces) {
  TeamSize size(4);
  for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{1000}, int64_t{1} << 20}) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
    std::atomic<int> pieces{0};
    parallel_for(n, 64, [&](int64_t b, int64_t e, int t) {
      EXPECT_LT(b, e);
      EXPECT_LT(t, pool_threads());
      pieces.fetch_add(1);
      for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1) << i;
    EXPECT_LE(pieces.load(), 4);
  }
}

TEST(ThreadPool, TaskExceptionReachesTheCallerAfterAllTasks) {
  TeamSize size(2);
  std::atomic<int> done{0};
  auto fn = [&](int t) {
    if (t == 3) throw std::runtime_error("task 3");
    done.fetch_add(1);
  };
  EXPECT_THROW(pool_run(8, TaskRef(fn)), std::runtime_error);
  EXPECT_EQ(done.load(), 7);
  // The team still works afterwards.
  std::atomic<int> again{0};
  auto fn2 = [&](int) { again.fetch_add(1); };
  pool_run(4, TaskRef(fn2));
  EXPECT_EQ(again.load(), 4);
}

TEST(ThreadPool, AForkedChildGetsATeamOfItsOwn) {
  // The team's threads do not survive fork(): a child that uses the pool (a test harness forking
  // ranks, a Python worker) must not wait for workers that do not exist.
  set_pool_threads(2);
  std::atomic<int> ran{0};
  auto count = [&](int) { ran.fetch_add(1); };
  pool_run(2, count);
  ASSERT_EQ(ran.load(), 2);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);  // a child waiting for missing workers dies instead of hanging the test
    std::atomic<int> in_child{0};
    auto child_count = [&](int) { in_child.fetch_add(1); };
    pool_run(8, child_count);
    set_pool_threads(3);  // and it can be resized there
    pool_run(8, child_count);
    _exit(in_child.load() == 16 && pool_threads() == 3 ? 0 : 1);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

}  // namespace
}  // namespace chorus::tensor
