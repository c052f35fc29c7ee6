// chorus-run — pipes made of owned file descriptors (chorus/unique_fd.h).
#pragma once

#include "chorus/unique_fd.h"

namespace chorus::run {

struct Pipe {
  UniqueFd read_end;
  UniqueFd write_end;
};

// pipe2(flags); both ends close on exec when flags has O_CLOEXEC.
Pipe make_pipe(int flags);

}  // namespace chorus::run
