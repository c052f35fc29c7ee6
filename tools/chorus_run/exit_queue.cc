#include "exit_queue.h"

#include <sys/epoll.h>
#include <sys/syscall.h>

#include <cerrno>

#include "chorus/error.h"

namespace chorus::run {

ExitQueue::ExitQueue() : epoll_(CHORUS_SYSCALL(::epoll_create1(EPOLL_CLOEXEC))) {}

void ExitQueue::watch(size_t index, pid_t pid) {
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd) throw_system_error(detail::concat("pidfd_open of rank process ", pid), errno);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = index;
  CHORUS_SYSCALL(::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, pidfd.get(), &event));
  if (pidfds_.size() <= index) pidfds_.resize(index + 1);
  pidfds_[index] = std::move(pidfd);
}

std::vector<size_t> ExitQueue::take() {
  std::vector<size_t> exited;
  epoll_event events[64];
  for (;;) {
    const int n = ::epoll_wait(epoll_.get(), events, 64, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_system_error("epoll_wait", errno);
    }
    for (int i = 0; i < n; ++i) {
      const size_t index = events[i].data.u64;
      ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, pidfds_[index].get(), nullptr);
      pidfds_[index].reset();
      exited.push_back(index);
    }
    if (n < 64) return exited;
  }
}

}  // namespace chorus::run
