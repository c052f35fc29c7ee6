// chorus — how a waiting rank spends its time: spin, yield, then sleep on its doorbell, chosen
// from how many ranks share the host's cores (the Exchange waits by it).
#pragma once

#include <cstddef>

namespace chorus {

struct WaitPolicy {
  int spin_passes = 0;   // progress passes before yielding
  int yield_passes = 0;  // sched_yield()s before sleeping, at least
  // Operations of at least yield_from_bytes per rank go on yielding until yield_ns after the
  // first yield (0: they do not; see for_ranks).
  long yield_ns = 0;
  size_t yield_from_bytes = 64 << 10;
  long sleep_ns = 0;  // longest single futex sleep (wake-ups come from peers sooner)
  // Chooses from the number of ranks on this host and the CPUs they may run on together
  // (`host_cpus`: the union of their affinity masks; 0 = this process's own mask), so that ranks
  // bound one per core spin, and ranks sharing cores yield (CHORUS_WAIT_SPIN / CHORUS_WAIT_YIELD
  // override).
  static WaitPolicy for_ranks(int local_ranks, int host_cpus = 0);
};

}  // namespace chorus
