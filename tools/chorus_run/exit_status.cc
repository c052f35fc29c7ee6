#include "exit_status.h"

#include <sys/wait.h>

#include <cstring>

namespace chorus::run {

std::string signal_name(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  return "SIG" + (abbrev != nullptr ? std::string(abbrev) : std::to_string(signal));
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
  }
  return "stopped with wait status " + std::to_string(status);
}

bool is_clean_exit(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace chorus::run
