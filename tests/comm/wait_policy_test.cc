// The wait policy follows where the ranks may run: ranks bound one per core spin (a bound rank's
// own mask has one CPU, but its peers run on the others), ranks sharing cores yield.
#include <gtest/gtest.h>
#include <sched.h>

#include <sys/resource.h>

#include <chrono>
#include <thread>
#include <vector>

#include "error_helpers.h"
#include "exchange.h"
#include "multiproc.h"
#include "transport/factory.h"

namespace chorus::testing {
namespace {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// Connects `n` processes, rank r bound to CPU cpus[pick(r)], and checks what connect() counts.
void expect_host_cpus(int n, int (*pick)(int), int want) {
  const std::vector<int> cpus = allowed_cpus();
  RunOptions bind;
  bind.before_connect = [&](int rank) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[static_cast<size_t>(pick(rank))], &one);
    ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  };
  run_wired(
      n,
      [&](int rank, transport::Wiring& w, Exchange&) {
        EXPECT_EQ(w.host_cpus, want) << "rank " << rank;
        const WaitPolicy policy = WaitPolicy::for_ranks(n, w.host_cpus);
        if (want >= n)
          EXPECT_GT(policy.spin_passes, 0) << "bound one per CPU: spin";
        else
          EXPECT_EQ(policy.spin_passes, 0) << "sharing CPUs: yield at once";
        // This process alone has one CPU: its own mask would call every world oversubscribed.
        EXPECT_EQ(WaitPolicy::for_ranks(n, 0).spin_passes, 0);
      },
      bind);
}

TEST(WaitPolicy, RanksBoundOnePerCpuSpin) {
  if (allowed_cpus().size() < 2) GTEST_SKIP() << "needs 2 CPUs";
  expect_host_cpus(
      2, [](int rank) { return rank; }, 2);
}

TEST(WaitPolicy, RanksBoundToOneCpuYield) {
  if (allowed_cpus().size() < 2) GTEST_SKIP() << "needs 2 CPUs";
  expect_host_cpus(
      2, [](int) { return 0; }, 1);
}

TEST(WaitPolicy, UnboundRanksCountTheOnlineCpus) {
  const int online = static_cast<int>(std::thread::hardware_concurrency());
  const WaitPolicy many = WaitPolicy::for_ranks(online + 1, online);
  EXPECT_EQ(many.spin_passes, 0);
  const WaitPolicy few = WaitPolicy::for_ranks(1, online);
  EXPECT_GT(few.spin_passes, 0);
}

TEST(WaitPolicy, RanksSharingCpusYieldLongerInLargeOperations) {
  const int online = static_cast<int>(std::thread::hardware_concurrency());
  const WaitPolicy shared = WaitPolicy::for_ranks(online + 1, online);
  EXPECT_GT(shared.yield_ns, 0);
  EXPECT_LT(shared.yield_from_bytes, size_t{1} << 20);
  const WaitPolicy alone = WaitPolicy::for_ranks(1, online);
  EXPECT_EQ(alone.yield_ns, 0) << "a rank with a CPU of its own sleeps after its short yields";
}

// Sleeps of this thread so far (voluntary context switches): a yield is not one, a futex wait is.
long thread_sleeps() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return u.ru_nvcsw;
}

// The receiver of a broadcast waits 500 ms for a late root. In an operation of at least
// CHORUS_WAIT_YIELD_FROM bytes it yields for the first CHORUS_WAIT_YIELD_US (250 ms) and then
// sleeps, in futex waits of at most 2 ms; a smaller operation sleeps after its few yields. So
// the large call sleeps, but about half as often as the small one. Counting sleeps instead of CPU
// time keeps the test indifferent to how busy the machine is.
TEST(WaitPolicy, LargeOperationsYieldForTheirBudgetThenSleep) {
  RunOptions o;
  o.env = {{"CHORUS_WAIT_SPIN", "0"},
           {"CHORUS_WAIT_YIELD", "0"},
           {"CHORUS_WAIT_YIELD_US", "250000"},
           {"CHORUS_WAIT_YIELD_FROM", "4096"}};
  run_ranks(
      2,
      [](Communicator& comm) {
        long sleeps[2] = {0, 0};
        const size_t counts[2] = {size_t{1} << 18, 16};  // 1 MiB, then 64 bytes
        for (int i = 0; i < 2; ++i) {
          std::vector<float> data(counts[i], comm.rank() == 0 ? 1.0f : 0.0f);
          comm.barrier();
          if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
          const long before = thread_sleeps();
          const auto t0 = std::chrono::steady_clock::now();
          comm.broadcast(data.data(), data.data(), counts[i], DataType::kF32, 0);
          sleeps[i] = thread_sleeps() - before;
          const double wall =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
          EXPECT_EQ(data.back(), 1.0f);
          if (comm.rank() == 1) EXPECT_GT(wall, 400) << "the receiver waited for the late root";
        }
        if (comm.rank() != 1) return;
        EXPECT_GT(sleeps[0], 0) << "the receiver of the 1 MiB broadcast yielded through the whole "
                                   "wait";
        EXPECT_LT(sleeps[0] * 10, sleeps[1] * 8)
            << "the 1 MiB broadcast's receiver slept " << sleeps[0] << " times, the 64-byte one's "
            << sleeps[1] << ": the large call did not yield first, or the small one did";
      },
      o);
}

// The yield budget is part of the wait: a budget longer than the timeout still times out, and
// the error names the late rank.
TEST(WaitPolicy, AYieldBudgetDoesNotOutlastTheTimeout) {
  RunOptions o;
  o.env = {{"CHORUS_WAIT_YIELD_US", "600000000"}, {"CHORUS_WAIT_YIELD_FROM", "0"}};
  run_ranks(
      2,
      [](Communicator& comm) {
        std::vector<float> data(size_t{1} << 18, 1.0f);
        if (comm.rank() == 0) {
          // Calls long after the receiver gave up, and finds the communicator failed.
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          EXPECT_TRUE(error_of(
              [&] { comm.broadcast(data.data(), data.data(), data.size(), DataType::kF32, 0); }));
          return;
        }
        comm.set_timeout(std::chrono::milliseconds(400));
        const auto t0 = std::chrono::steady_clock::now();
        auto e = error_of(
            [&] { comm.broadcast(data.data(), data.data(), data.size(), DataType::kF32, 0); });
        ASSERT_TRUE(e);
        EXPECT_EQ(e->kind(), ErrorKind::kTimeout) << e->what();
        EXPECT_TRUE(contains(e->what(), "rank 0")) << e->what();
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1200));
      },
      o);
}

}  // namespace
}  // namespace chorus::testing
