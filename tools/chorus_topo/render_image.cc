#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "chorus/error.h"
#include "chorus/unique_fd.h"
#include "views.h"

namespace chorus::topo::cli {
namespace {

bool on_path(const char* program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::string_view dirs = path;
  while (!dirs.empty()) {
    const size_t colon = dirs.find(':');
    const std::filesystem::path candidate =
        std::filesystem::path(std::string(dirs.substr(0, colon))) / program;
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  return false;
}

}  // namespace

void render_image(const std::string& dot, const std::string& format, const std::string& path) {
  if (!on_path("dot"))
    throw Error(ErrorKind::kSystem,
                "Graphviz's dot is not installed (Debian: apt-get install graphviz); --dot prints "
                "the graph to render elsewhere");
  int fds[2];
  CHORUS_SYSCALL(::pipe(fds));
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  const std::string type = "-T" + format;
  const pid_t pid = ::fork();
  if (pid < 0) throw_system_error("fork", errno);
  if (pid == 0) {
    ::dup2(read_end.get(), STDIN_FILENO);
    read_end.reset();
    write_end.reset();
    ::execlp("dot", "dot", type.c_str(), "-o", path.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  read_end.reset();
  // dot may exit early (a bad path): a write to the closed pipe must fail, not kill us.
  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &previous);
  for (size_t done = 0; done < dot.size();) {
    const ssize_t n = ::write(write_end.get(), dot.data() + done, dot.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    done += static_cast<size_t>(n);
  }
  write_end.reset();
  ::sigaction(SIGPIPE, &previous, nullptr);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error(ErrorKind::kSystem, "dot " + type + " -o " + path + " failed");
}

}  // namespace chorus::topo::cli
