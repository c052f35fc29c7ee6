// chorus-run — pipes made of owned file descriptors (pipe.h).
#include "pipe.h"

#include <fcntl.h>

#include "chorus/error.h"

namespace chorus::run {

Pipe make_pipe(int flags) {
  int fds[2];
  CHORUS_SYSCALL(::pipe2(fds, flags));
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

}  // namespace chorus::run
