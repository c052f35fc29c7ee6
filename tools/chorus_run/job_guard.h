// chorus-run — the job guard: stops the ranks' process trees if chorus-run dies without doing it.
//
// Each rank runs in a process group of its own and dies with chorus-run (PR_SET_PDEATHSIG). That
// reaches the rank's own process only: a rank started through a wrapper (`sh -c "prog; echo"`)
// would leave `prog` running, unsupervised, after a `kill -9` of chorus-run. So chorus-run forks
// a small guard process before it starts any rank and tells it each rank's process group through
// a pipe, and when the group is done with (chorus-run has reaped the rank and killed what was
// left in its group), so that a group id the kernel may give out again is never signalled. The
// guard holds nothing else (every other descriptor closed, the signals chorus-run handles
// ignored). When the pipe reaches end-of-file without the closing word, chorus-run is gone: the
// guard sends SIGKILL to every group it still holds, and exits. A process that leaves its rank's
// group (setsid, setpgid) is not followed.
#pragma once

#include <sys/types.h>

#include "chorus/unique_fd.h"

namespace chorus::run {

class JobGuard {
 public:
  // Forks the guard. Call it before any rank is started, and before descriptors the ranks must
  // not outlive (the store's listening socket) are opened.
  JobGuard();
  // Without finish(): as if chorus-run had died (the guard kills the groups).
  ~JobGuard();
  JobGuard(const JobGuard&) = delete;
  JobGuard& operator=(const JobGuard&) = delete;

  // The process group `pgid` (a rank's) is to be killed if chorus-run dies...
  void guard(pid_t pgid);
  // ...until this: it is gone.
  void release(pid_t pgid);
  // The job is over and its groups are stopped: the guard exits without killing; reaps it.
  void finish();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  UniqueFd pipe_;  // the write end
};

}  // namespace chorus::run
