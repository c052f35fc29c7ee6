#include "launcher_report.h"

#include <sys/socket.h>

#include <atomic>
#include <string>

#include "chorus/config.h"

namespace chorus {
namespace {

const IntKnob kStatusFd{"CHORUS_RUN_STATUS_FD", -1,
                        "socket on which a failing rank names the rank it blames (set by "
                        "chorus-run, which names the rank that failed first from it)"};

}  // namespace

int blamed_rank(const Error& e, int rank, int world_size) {
  const bool elsewhere = e.kind() == ErrorKind::kPeerFailure || e.kind() == ErrorKind::kTimeout;
  return elsewhere && e.peer() >= 0 && e.peer() < world_size ? e.peer() : rank;
}

void report_failure_to_launcher(int rank, int cause) noexcept {
  static std::atomic<bool> reported{false};
  try {
    const int64_t fd = kStatusFd.get();
    if (fd < 0 || reported.exchange(true)) return;
    // One datagram. Never waited for, and never a SIGPIPE when chorus-run is gone.
    const std::string line = "failed " + std::to_string(rank) + " " + std::to_string(cause) + "\n";
    (void)::send(static_cast<int>(fd), line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  } catch (...) {
    // A malformed CHORUS_RUN_STATUS_FD: no report.
  }
}

}  // namespace chorus
