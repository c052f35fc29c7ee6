#include "signal_watch.h"

#include <sys/signalfd.h>

#include <cerrno>

#include "chorus/error.h"

namespace chorus::run {

SignalWatch::SignalWatch() {
  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled, sig);
  CHORUS_SYSCALL(::sigprocmask(SIG_BLOCK, &handled, &previous_mask_));
  fd_.reset(CHORUS_SYSCALL(::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK)));
  struct sigaction action {};
  sigemptyset(&action.sa_mask);
  action.sa_handler = SIG_IGN;
  CHORUS_SYSCALL(::sigaction(SIGPIPE, &action, &previous_sigpipe_));
  action.sa_handler = SIG_DFL;
  CHORUS_SYSCALL(::sigaction(SIGCHLD, &action, &previous_sigchld_));
}

SignalWatch::~SignalWatch() {
  ::sigaction(SIGCHLD, &previous_sigchld_, nullptr);
  ::sigaction(SIGPIPE, &previous_sigpipe_, nullptr);
  ::sigprocmask(SIG_SETMASK, &previous_mask_, nullptr);
}

std::vector<int> SignalWatch::take() {
  std::vector<int> signals;
  signalfd_siginfo info[16];
  for (;;) {
    ssize_t n = ::read(fd_.get(), info, sizeof info);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      throw_system_error("read(signalfd)", errno);
    }
    for (size_t i = 0; i < static_cast<size_t>(n) / sizeof info[0]; ++i)
      signals.push_back(static_cast<int>(info[i].ssi_signo));
    if (static_cast<size_t>(n) < sizeof info) break;
  }
  return signals;
}

}  // namespace chorus::run
