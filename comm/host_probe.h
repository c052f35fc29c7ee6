// chorus — the host probe: the first communicator on a host without fitted cost constants
// measures its collectives briefly, fits the cost model (algo/cost_fit.h) and caches it for every
// later job (algo::default_cost_path()), so that no host chooses by the model's defaults for long
// (docs/ARCHITECTURE.md, "Cost model").
//
// Rank 0 decides at set-up whether to probe (host_probe_wanted(), and the probe lock, so that two
// jobs starting together on a fresh host do not both measure a machine the other one loads); every
// rank learns the decision with rank 0's choices, runs the same calls (probe_host_costs()) and
// installs the constants rank 0 fitted and broadcast, so selection stays identical on every rank.
#pragma once

#include <string>

namespace chorus {

class Communicator;

// What rank 0 knows at set-up that decides whether the probe runs.
struct ProbeConditions {
  int world_size = 1;
  int hosts = 1;
  bool shm = false;             // the ranks reach each other through the shm transport
  bool model_defaults = false;  // rank 0's model is the defaults: CHORUS_TUNE=on, no
                                // CHORUS_COST_FILE, no cache file, not a split() child's
  bool table_named = false;     // CHORUS_TUNE_FILE or CHORUS_TUNE=builtin
  bool forced = false;          // CHORUS_ALGO / CommOptions::algorithm: the model is not used
  bool deterministic = false;   // forced algorithms are replaced: the curves would be mislabelled
};

// Why rank 0 does not probe (empty: it does): CHORUS_COST_PROBE=off or one of the conditions
// above. Throws InvalidArgument for a CHORUS_COST_PROBE other than auto or off.
std::string host_probe_skipped(const ProbeConditions& c);

// The lock rank 0 holds while it probes: a file beside the cache, made exclusively. Another job's
// lock younger than a minute means that job is probing (this one keeps the defaults); an older one
// is left from a job that died and is taken over. Released (the file removed) on destruction.
class HostProbeLock {
 public:
  // Empty (held() false) when another job holds it or the cache directory cannot be written.
  static HostProbeLock try_acquire(const std::string& cache_path);
  HostProbeLock() = default;
  HostProbeLock(HostProbeLock&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  HostProbeLock& operator=(HostProbeLock&& o) noexcept;
  ~HostProbeLock();
  bool held() const { return !path_.empty(); }

 private:
  std::string path_;
};

// Collective (every rank of `comm` calls it after set-up, with nothing else in flight): times each
// variant of all_reduce, reduce_scatter, all_gather and broadcast at a few sizes, and returns the
// constants rank 0 fitted to the slowest rank's times, as a constants file's text (the same on
// every rank). Rank 0 writes them to `cache_path` (a temporary file renamed over it, so that a
// reader never sees half a file), logs where and releases `lock` (its own, held since set-up;
// empty on the other ranks) before the others receive the text. A cache it cannot write is a
// warning, and the constants are still used by this job.
std::string probe_host_costs(Communicator& comm, const std::string& cache_path,
                             HostProbeLock& lock);

}  // namespace chorus
