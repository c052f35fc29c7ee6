// chorus-run — the ranks' exits, in the order they happened.
//
// When a rank dies, the ranks that fail because of it (they lose the bootstrap store, or see the
// peer gone) may exit a millisecond later, and by the time chorus-run runs all are zombies.
// waitpid(-1) hands those out in an order of its own, so chorus-run would sometimes name a
// consequence as the first failure. Here each rank has a pidfd in one epoll instance: a pidfd
// turns readable when its process exits, and epoll reports ready descriptors in the order they
// became ready (its ready list is a queue). A rank that had exited before it was watched is
// queued when watched, and ranks are watched as they are started, so an early exit still comes
// before every later one.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <vector>

#include "chorus/unique_fd.h"

namespace chorus::run {

class ExitQueue {
 public:
  ExitQueue();

  // Watches the child `pid` (not yet reaped), reported as `index`.
  void watch(size_t index, pid_t pid);
  // Readable while some watched process has exited and is not taken yet.
  int fd() const { return epoll_.get(); }
  // The indices of the watched processes that have exited since the last call, in the order of
  // their exits; each is reported once (then forgotten). Does not reap them.
  std::vector<size_t> take();

 private:
  UniqueFd epoll_;
  std::vector<UniqueFd> pidfds_;  // by index
};

}  // namespace chorus::run
