// chorus-run — the signals the launcher handles (SIGCHLD and the ones it forwards), delivered
// through a signalfd so that one poll() waits for exits, signals and rank output without spinning.
#pragma once

#include <signal.h>

#include <vector>

#include "chorus/unique_fd.h"

namespace chorus::run {

class SignalWatch {
 public:
  // Blocks SIGCHLD, SIGINT, SIGTERM and SIGHUP and ignores SIGPIPE (a closed stdout must not kill
  // the launcher while ranks run). An inherited "ignore" of SIGCHLD is undone: it would make the
  // kernel reap the ranks unseen. Create it before the first fork so no exit goes unseen.
  SignalWatch();
  // Restores the previous mask and actions.
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  int fd() const { return fd_.get(); }
  // The signals that arrived since the last call, in arrival order (empty when none).
  std::vector<int> take();

  // The signals chorus-run passes on to every rank.
  static bool is_forwarded(int signal) {
    return signal == SIGINT || signal == SIGTERM || signal == SIGHUP;
  }

 private:
  sigset_t previous_mask_;
  struct sigaction previous_sigpipe_;
  struct sigaction previous_sigchld_;
  UniqueFd fd_;
};

}  // namespace chorus::run
