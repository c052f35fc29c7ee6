// chorus-run — which rank a failed job was waiting for.
//
// When a rank stops (SIGSTOP, a debugger, a swapped-out node) or hangs in its own code, the others
// fail at their deadline, and the first of them to exit is not the rank at fault. Every chorus
// rank that fails says which rank its error names as the origin (failure_reports.h): the one it
// was still waiting for, or the one that failed first. Followed from each failed rank, these
// reports end at the rank the job was waiting for; the one most of them end at is the culprit.
// It may have failed by itself (a crash that took a moment to finish dying: the first failure
// is then this rank), or not at all: it was still running when the others gave up, stopped or
// slow, and chorus-run ended it after the grace period.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "failure_reports.h"

namespace chorus::run {

// How one rank ended, as the supervisor saw it.
struct RankEnd {
  int rank = 0;                // global rank
  bool failed = false;         // exited with a failure (non-zero code or a signal)
  bool failed_itself = false;  // ... not because chorus-run signalled it
  bool stopped = false;        // it was stopped (SIGSTOP) when chorus-run signalled it
};

struct Culprit {
  size_t index = 0;  // into the RankEnds
  // The failed ranks whose reports lead to it (directly or through other ranks), in rank order.
  std::vector<int> waiting;
  // "0 -> 1, 2 -> 3, 3 -> 1": every report followed (rank -> the rank it blamed).
  std::string reports;
};

// The rank the reports of the failed ranks lead to most often (ties: the one `first` leads to),
// or nullopt when no failed rank reported anything. A report that names a rank on another node,
// or leads round in a loop, ends the path at the last rank reached.
std::optional<Culprit> find_culprit(const std::vector<RankEnd>& ends, const FailureReports& reports,
                                    size_t first);

}  // namespace chorus::run
