#include "wait_policy.h"

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <thread>

#include "chorus/config.h"

namespace chorus {
namespace {
const IntKnob kWaitSpin{"CHORUS_WAIT_SPIN", -1,
                        "progress passes a waiting rank spins before yielding (-1 = auto: 0 when "
                        "ranks outnumber cores)"};
const IntKnob kWaitYield{"CHORUS_WAIT_YIELD", -1,
                         "sched_yield()s before a waiting rank sleeps on its futex (-1 = auto)"};
const IntKnob kWaitYieldUs{"CHORUS_WAIT_YIELD_US", -1,
                           "microseconds a waiting rank keeps yielding before it sleeps on its "
                           "futex (-1 = auto)"};
const IntKnob kWaitYieldFrom{"CHORUS_WAIT_YIELD_FROM", -1,
                             "operations of at least this many bytes per rank keep yielding for "
                             "CHORUS_WAIT_YIELD_US (-1 = auto)"};

int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}
}  // namespace

WaitPolicy WaitPolicy::for_ranks(int local_ranks, int host_cpus) {
  WaitPolicy p;
  // A rank bound to one core is not oversubscribed when its peers are bound to the others: the
  // union of the host's masks counts, not this process's own.
  const bool oversubscribed = local_ranks > std::max(usable_cpus(), host_cpus);
  p.spin_passes = oversubscribed ? 0 : 4000;
  // Oversubscribed, a waiter gives its core to a peer for a few passes before it sleeps: a
  // futex wake-up costs a scheduler round trip (tens of us), and 2 passes were measured to leave
  // 15-400 us outliers at small sizes with 4 and 8 ranks on 2 cores (8 B all-reduce np=4:
  // 4.7-107 us over launches, against 5.0-6.1 with 8 passes). Many more passes (32) hurt large
  // messages: the ranks doing the copies get interrupted (64 MiB np=4: 1.1-1.3 GB/s against 1.5).
  p.yield_passes = oversubscribed ? 8 : 16;
  p.sleep_ns = 2'000'000;
  // In operations of 64 KiB and more per rank, an oversubscribed waiter goes on yielding for up
  // to 2 ms. Its peers are then copying, and one that sleeps is woken only after they finish
  // theirs and the scheduler gets round to it: broadcast np=4 in place, 256 KiB and 1 MiB,
  // 2.9-3.7 GB/s sleeping against 3.5-4.9 yielding (three alternations); 64 MiB stayed level
  // (median of five: 3.24 against 3.05, all_gather 2.61 against 2.64). Small calls keep the short
  // yields: with all four ranks yielding, 8 B all-reduce np=4 took 6-7 us against 4.1-4.6.
  if (oversubscribed) p.yield_ns = 2'000'000;
  if (int64_t v = kWaitSpin.get(); v >= 0) p.spin_passes = static_cast<int>(v);
  if (int64_t v = kWaitYield.get(); v >= 0) p.yield_passes = static_cast<int>(v);
  if (int64_t v = kWaitYieldUs.get(); v >= 0) p.yield_ns = static_cast<long>(v) * 1000;
  if (int64_t v = kWaitYieldFrom.get(); v >= 0) p.yield_from_bytes = static_cast<size_t>(v);
  return p;
}

}  // namespace chorus
