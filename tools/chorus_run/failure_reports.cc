#include "failure_reports.h"

#include <sys/socket.h>

#include <cerrno>
#include <sstream>

#include "chorus/error.h"

namespace chorus::run {

FailureReports::FailureReports() {
  int fds[2];
  CHORUS_SYSCALL(::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, fds));
  receive_.reset(fds[0]);
  send_.reset(fds[1]);
}

void FailureReports::read() {
  char buffer[256];
  for (;;) {
    const ssize_t n = ::recv(receive_.get(), buffer, sizeof buffer, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nothing more now (chorus-run holds the other end: never closed)
    std::string line(buffer, static_cast<size_t>(n));
    if (!line.empty() && line.back() == '\n') line.pop_back();
    add_line(line);
  }
}

void FailureReports::add_line(const std::string& line) {
  std::istringstream in(line);
  std::string word;
  int rank = -1, cause = -1;
  if (!(in >> word >> rank >> cause) || word != "failed" || rank < 0 || cause < 0) return;
  cause_.emplace(rank, cause);
}

std::optional<int> FailureReports::cause_of(int rank) const {
  auto it = cause_.find(rank);
  if (it == cause_.end()) return std::nullopt;
  return it->second;
}

}  // namespace chorus::run
