// chorus — the shm link's own part of a Request (Request::state): how far it has moved the
// message, and what it waits on. Every file of the link reads it through progress(); no layer
// above the transport sees it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/transport.h"

namespace chorus::transport::shm {

struct Progress {
  size_t offset = 0;      // bytes moved so far
  uint64_t token = 0;     // the number of the rendezvous or shared message it waits on
  uint64_t addr = 0;      // where the peer's bytes are (an assisted single-copy receive)
  uint8_t phase = 0;      // the link's state machine (0: not started; ShmLink::kAwaitingAck...)
  bool assisted = false;  // a send whose receiver was offered a share of the copy
};

inline Progress& progress(Request& r) { return r.state<Progress>(); }
inline const Progress& progress(const Request& r) { return r.state<Progress>(); }

// Whether the operation reads the request's result again (Request::kNotReadAgain: if not,
// large results are written with streaming stores).
inline bool stream_dst(const Request& r) { return (r.facts & Request::kNotReadAgain) != 0; }
inline bool shared(const Request& r) { return (r.facts & Request::kShared) != 0; }

}  // namespace chorus::transport::shm
