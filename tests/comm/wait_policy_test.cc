// The wait policy follows where the ranks may run: ranks bound one per core spin (a bound rank's
// own mask has one CPU, but its peers run on the others), ranks sharing cores yield.
#include <gtest/gtest.h>
#include <sched.h>

#include <thread>
#include <vector>

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
  run_wired(n, [&](int rank, transport::Wiring& w, Exchange&) {
    EXPECT_EQ(w.host_cpus, want) << "rank " << rank;
    const WaitPolicy policy = WaitPolicy::for_ranks(n, w.host_cpus);
    if (want >= n) EXPECT_GT(policy.spin_passes, 0) << "bound one per CPU: spin";
    else EXPECT_EQ(policy.spin_passes, 0) << "sharing CPUs: yield at once";
    // This process alone has one CPU: its own mask would call every world oversubscribed.
    EXPECT_EQ(WaitPolicy::for_ranks(n, 0).spin_passes, 0);
  }, bind);
}

TEST(WaitPolicy, RanksBoundOnePerCpuSpin) {
  if (allowed_cpus().size() < 2) GTEST_SKIP() << "needs 2 CPUs";
  expect_host_cpus(2, [](int rank) { return rank; }, 2);
}

TEST(WaitPolicy, RanksBoundToOneCpuYield) {
  if (allowed_cpus().size() < 2) GTEST_SKIP() << "needs 2 CPUs";
  expect_host_cpus(2, [](int) { return 0; }, 1);
}

TEST(WaitPolicy, UnboundRanksCountTheOnlineCpus) {
  const int online = static_cast<int>(std::thread::hardware_concurrency());
  const WaitPolicy many = WaitPolicy::for_ranks(online + 1, online);
  EXPECT_EQ(many.spin_passes, 0);
  const WaitPolicy few = WaitPolicy::for_ranks(1, online);
  EXPECT_GT(few.spin_passes, 0);
}

}  // namespace
}  // namespace chorus::testing
