#include "rank_spawn.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "pipe.h"

namespace chorus::run {
namespace {

constexpr std::array<std::string_view, 11> kLaunchVariables = {
    "CHORUS_RANK",   "CHORUS_WORLD_SIZE", "CHORUS_LOCAL_RANK",   "CHORUS_LOCAL_WORLD_SIZE",
    "CHORUS_NNODES", "CHORUS_NODE_RANK",  "CHORUS_MASTER_ADDR",  "CHORUS_MASTER_PORT",
    "CHORUS_JOB_ID", "CHORUS_STORE_FD",   "CHORUS_RUN_STATUS_FD"};

bool is_launch_variable(std::string_view entry) {
  const std::string_view name = entry.substr(0, entry.find('='));
  for (std::string_view v : kLaunchVariables)
    if (name == v) return true;
  return false;
}

std::vector<char*> as_argv(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// In the child: reports errno to the parent and exits as a shell does for a command it cannot run.
[[noreturn]] void child_failed(int error_fd) {
  const int err = errno;
  (void)!::write(error_fd, &err, sizeof err);
  ::_exit(127);
}

// Runs in the forked child: only async-signal-safe calls until exec.
[[noreturn]] void exec_child(const SpawnSpec& spec, char* const* argv, char* const* envp,
                             const cpu_set_t* cpus, pid_t parent, int error_fd) {
  auto fail = [error_fd]() { child_failed(error_fd); };
  // Its own process group: signals reach the rank and whatever it starts, and a terminal's
  // Ctrl-C reaches chorus-run alone, which forwards it once.
  if (::setpgid(0, 0) != 0) fail();
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail();
  if (::getppid() != parent) ::_exit(127);  // chorus-run died before prctl took effect
  if (spec.stdout_fd >= 0 && ::dup2(spec.stdout_fd, STDOUT_FILENO) < 0) fail();
  if (spec.stderr_fd >= 0 && ::dup2(spec.stderr_fd, STDERR_FILENO) < 0) fail();
  for (int fd : spec.inherit_fds)
    if (::fcntl(fd, F_SETFD, 0) != 0) fail();
  if (cpus != nullptr && ::sched_setaffinity(0, sizeof *cpus, cpus) != 0) fail();
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGPIPE, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execvpe(argv[0], argv, envp);
  child_failed(error_fd);
}

}  // namespace

std::vector<std::string> rank_environment(const JobLayout& layout, int local_rank,
                                          std::optional<int> store_fd,
                                          const char* const* inherited) {
  std::vector<std::string> env;
  for (const char* const* e = inherited; e != nullptr && *e != nullptr; ++e)
    if (!is_launch_variable(*e)) env.emplace_back(*e);
  auto set = [&env](std::string_view name, const auto& value) {
    env.push_back(detail::concat(name, "=", value));
  };
  set("CHORUS_RANK", layout.global_rank(local_rank));
  set("CHORUS_WORLD_SIZE", layout.world_size());
  set("CHORUS_LOCAL_RANK", local_rank);
  set("CHORUS_LOCAL_WORLD_SIZE", layout.nproc_per_node);
  set("CHORUS_NNODES", layout.nnodes);
  set("CHORUS_NODE_RANK", layout.node_rank);
  set("CHORUS_MASTER_ADDR", layout.master_addr);
  set("CHORUS_MASTER_PORT", layout.master_port);
  set("CHORUS_JOB_ID", layout.job_id);
  if (store_fd) set("CHORUS_STORE_FD", *store_fd);
  if (layout.status_fd >= 0) set("CHORUS_RUN_STATUS_FD", layout.status_fd);
  return env;
}

pid_t spawn_rank(const SpawnSpec& spec) {
  // Everything the child needs is built before fork.
  std::vector<char*> argv = as_argv(spec.argv);
  std::vector<char*> envp = as_argv(spec.env);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int cpu : spec.cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE)
      throw Error(ErrorKind::kInvalidArgument, detail::concat("cannot bind to CPU ", cpu));
    CPU_SET(cpu, &cpus);
  }
  const cpu_set_t* bind = spec.cpus.empty() ? nullptr : &cpus;
  Pipe error_pipe = make_pipe(O_CLOEXEC);
  const pid_t parent = ::getpid();

  const pid_t pid = CHORUS_SYSCALL(::fork());
  if (pid == 0)
    exec_child(spec, argv.data(), envp.data(), bind, parent, error_pipe.write_end.get());

  // A successful exec closes the write end (close-on-exec): EOF. A failed one sends errno first.
  error_pipe.write_end.reset();
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(error_pipe.read_end.get(), &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return pid;

  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  throw ExecError(detail::concat(
      "cannot execute '", spec.argv[0], "': ",
      n == sizeof child_errno ? std::strerror(child_errno) : "the child failed before exec"));
}

}  // namespace chorus::run
