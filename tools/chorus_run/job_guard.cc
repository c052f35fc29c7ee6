#include "job_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <vector>

#include "chorus/error.h"
#include "pipe.h"

namespace chorus::run {
namespace {

// The words on the pipe: a group to guard (its id), one to release (minus its id), and the end
// of a job that stopped its groups itself (0, which no group is).
constexpr pid_t kFinished = 0;

// In the forked guard: waits for end-of-file on `fd`, then kills the groups unless told not to.
[[noreturn]] void run_guard(int fd, pid_t launcher) {
  ::prctl(PR_SET_NAME, "chorus-run-guard", 0, 0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::signal(sig, SIG_IGN);
  std::vector<pid_t> groups;
  bool finished = false;
  for (;;) {
    pid_t pgid = 0;
    const ssize_t n = ::read(fd, &pgid, sizeof pgid);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof pgid)) break;  // end of file (writes are atomic)
    if (pgid == kFinished) {
      finished = true;
    } else if (pgid > 0) {
      groups.push_back(pgid);
    } else {
      std::erase(groups, -pgid);
    }
  }
  if (!finished && !groups.empty()) {
    for (pid_t pgid : groups) ::kill(-pgid, SIGKILL);
    std::fprintf(stderr,
                 "chorus-run-guard: chorus-run (pid %d) ended without stopping its ranks: killed "
                 "the process groups of the %zu still running\n",
                 static_cast<int>(launcher), groups.size());
  }
  ::_exit(0);
}

}  // namespace

JobGuard::JobGuard() {
  Pipe pipe = make_pipe(O_CLOEXEC);
  const pid_t launcher = ::getpid();
  pid_ = CHORUS_SYSCALL(::fork());
  if (pid_ == 0) {
    // Keep the pipe's read end and stderr only: above all no copy of the store's socket or of the
    // ranks' output pipes, which would keep them open after chorus-run.
    const int keep = pipe.read_end.get();
    ::dup2(keep, STDIN_FILENO);
    if (const UniqueFd stdout_null(::open("/dev/null", O_WRONLY | O_CLOEXEC)); stdout_null)
      ::dup2(stdout_null.get(), STDOUT_FILENO);
    if (::syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
      const long max_fd = ::sysconf(_SC_OPEN_MAX);
      for (int fd = 3; fd < (max_fd > 0 && max_fd < 65536 ? max_fd : 65536); ++fd) ::close(fd);
    }
    run_guard(STDIN_FILENO, launcher);
  }
  pipe_ = std::move(pipe.write_end);
}

JobGuard::~JobGuard() {
  pipe_.reset();
  if (pid_ > 0) {
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

void JobGuard::guard(pid_t pgid) {
  // A 4-byte write to a pipe is atomic; the guard reads until chorus-run closes it.
  if (::write(pipe_.get(), &pgid, sizeof pgid) != static_cast<ssize_t>(sizeof pgid))
    throw_system_error("write to the job guard", errno);
}

void JobGuard::release(pid_t pgid) {
  const pid_t word = -pgid;
  (void)!::write(pipe_.get(), &word, sizeof word);
}

void JobGuard::finish() {
  if (!pipe_) return;
  const pid_t word = kFinished;
  (void)!::write(pipe_.get(), &word, sizeof word);
  pipe_.reset();
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

}  // namespace chorus::run
