// rank_probe: a stand-in rank for chorus-run's tests. It runs its arguments as a list of actions,
// in order, then exits 0. Actions (R is a global rank: the action applies on that rank only):
//   env             print one line "rank=<r> CHORUS_RANK=... CHORUS_WORLD_SIZE=... ..."
//   lines K         print K lines to stdout (the first written in two pieces) and K to stderr,
//                   then "tail <r>" without a newline
//   ready           print "ready <r> <pid>"
//   store-fd        check that CHORUS_STORE_FD is a listening socket on CHORUS_MASTER_PORT on
//                   rank 0 and absent elsewhere, and that no other fd listens; print
//                   "store-fd <r> ok [port <p>]" or exit 1 with the reason
//   shm-litter      create the shm segment /chorus-<job id>-litter-<r> and print its name
//   ignore-term     ignore SIGTERM from now on
//   sleep-ms MS     sleep
//   sleep           sleep until killed
//   exit R CODE     exit with CODE
//   segv R          die of SIGSEGV (without a core file)

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

namespace {

int g_rank = -1;

void say(int fd, const std::string& text) { (void)!::write(fd, text.data(), text.size()); }

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

[[noreturn]] void fail(const std::string& why) {
  say(STDERR_FILENO, "rank_probe " + std::to_string(g_rank) + ": " + why + "\n");
  std::exit(1);
}

void print_env() {
  std::string line = "rank=" + std::to_string(g_rank);
  for (const char* name :
       {"CHORUS_RANK", "CHORUS_WORLD_SIZE", "CHORUS_LOCAL_RANK", "CHORUS_LOCAL_WORLD_SIZE",
        "CHORUS_NNODES", "CHORUS_NODE_RANK", "CHORUS_MASTER_ADDR", "CHORUS_MASTER_PORT",
        "CHORUS_JOB_ID", "CHORUS_STORE_FD"})
    line += std::string(" ") + name + "=" + env_or(name, "<unset>");
  say(STDOUT_FILENO, line + "\n");
}

void print_lines(int count) {
  const std::string r = std::to_string(g_rank);
  for (int i = 0; i < count; ++i) {
    const std::string text = "out " + r + " " + std::to_string(i) + "\n";
    if (i == 0) {
      // A line that reaches the launcher in two reads must still be tagged once.
      say(STDOUT_FILENO, text.substr(0, 4));
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      say(STDOUT_FILENO, text.substr(4));
    } else {
      say(STDOUT_FILENO, text);
    }
    say(STDERR_FILENO, "err " + r + " " + std::to_string(i) + "\n");
  }
  say(STDOUT_FILENO, "tail " + r);
}

bool is_listening_socket(int fd) {
  int listening = 0;
  socklen_t len = sizeof listening;
  return ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening != 0;
}

void check_store_fd() {
  const std::string fd_text = env_or("CHORUS_STORE_FD", "");
  const int store_fd = fd_text.empty() ? -1 : std::atoi(fd_text.c_str());
  std::string note;
  if (g_rank == 0) {
    if (store_fd < 0) fail("CHORUS_STORE_FD is not set on rank 0");
    if (!is_listening_socket(store_fd)) fail("CHORUS_STORE_FD=" + fd_text + " is not listening");
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getsockname(store_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      fail("getsockname failed");
    const int port = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (std::to_string(port) != env_or("CHORUS_MASTER_PORT", ""))
      fail("store socket port " + std::to_string(port) + " != CHORUS_MASTER_PORT");
    note = " port " + std::to_string(port);
  } else if (store_fd >= 0) {
    fail("CHORUS_STORE_FD is set on rank " + std::to_string(g_rank));
  }
  for (int fd = 3; fd < 1024; ++fd)
    if (fd != store_fd && is_listening_socket(fd))
      fail("fd " + std::to_string(fd) + " is a listening socket it should not have inherited");
  say(STDOUT_FILENO, "store-fd " + std::to_string(g_rank) + " ok" + note + "\n");
}

void make_shm_litter() {
  const std::string name =
      "/chorus-" + env_or("CHORUS_JOB_ID", "nojob") + "-litter-" + std::to_string(g_rank);
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) fail("shm_open " + name + " failed");
  ::close(fd);
  say(STDOUT_FILENO, "litter " + name + "\n");
}

[[noreturn]] void die_of_segv() {
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  ::signal(SIGSEGV, SIG_DFL);
  ::raise(SIGSEGV);
  std::abort();
}

}  // namespace

int main(int argc, char** argv) {
  g_rank = std::atoi(env_or("CHORUS_RANK", "-1").c_str());
  auto arg = [&](int i) -> std::string_view {
    if (i >= argc) fail("missing argument after " + std::string(argv[i - 1]));
    return argv[i];
  };
  auto number = [&](int i) { return std::atoi(std::string(arg(i)).c_str()); };
  for (int i = 1; i < argc; ++i) {
    const std::string_view action = argv[i];
    if (action == "env") {
      print_env();
    } else if (action == "lines") {
      print_lines(number(++i));
    } else if (action == "ready") {
      say(STDOUT_FILENO,
          "ready " + std::to_string(g_rank) + " " + std::to_string(::getpid()) + "\n");
    } else if (action == "store-fd") {
      check_store_fd();
    } else if (action == "shm-litter") {
      make_shm_litter();
    } else if (action == "ignore-term") {
      ::signal(SIGTERM, SIG_IGN);
    } else if (action == "sleep-ms") {
      std::this_thread::sleep_for(std::chrono::milliseconds(number(++i)));
    } else if (action == "sleep") {
      for (;;) ::pause();
    } else if (action == "exit") {
      const int rank = number(++i);
      const int code = number(++i);
      if (rank == g_rank) std::exit(code);
    } else if (action == "segv") {
      if (number(++i) == g_rank) die_of_segv();
    } else {
      fail("unknown action '" + std::string(action) + "'");
    }
  }
  return 0;
}
