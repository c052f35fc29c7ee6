// chorus-run — the bootstrap store's listening socket, opened by the launcher on node 0 and
// inherited by rank 0 (CHORUS_STORE_FD). Opening it here means a kernel-picked port is known
// before any rank starts and cannot be taken by someone else between choosing and binding.
#pragma once

#include <string>

#include "chorus/unique_fd.h"

namespace chorus::run {

struct StoreListener {
  UniqueFd fd;   // listening, close-on-exec
  int port = 0;  // the bound port (the kernel's choice when 0 was asked for)
};

// Binds and listens on addr:port (port 0: any free port). Throws chorus::Error with an actionable
// message when the port is in use or addr is not an address of this host.
StoreListener open_store_listener(const std::string& addr, int port);

}  // namespace chorus::run
