// chorus — where a rank runs, as the transport's set-up finds it (transport/factory.h) and the
// ring order uses it (algo::ring_by_locality).
#pragma once

namespace chorus::transport {

// Its host index and, when the rank is bound to a subset of the host's CPUs, the package
// (socket), NUMA node and lowest CPU of that subset (-1 = not bound, or the subset spans several).
struct RankPlace {
  int host = 0;
  int package = -1;
  int numa = -1;
  int cpu = -1;
};

}  // namespace chorus::transport
