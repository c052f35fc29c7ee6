// chorus — point-to-point messages a rank sends to itself (send, recv and send_recv whose peer is
// this rank). They never reach a transport: a send to self copies the message into this queue
// and completes, a receive from self takes the oldest queued message, so self messages pair by
// order like those between two ranks. The caller (communicator.cc) orders them: it waits for
// the communicator's earlier operations, and for the stream of a stream-ordered call, first.
#pragma once

#include <cstddef>
#include <deque>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/gpu/runtime.h"

namespace chorus {

class SelfMessages {
 public:
  // Copies `bytes` at `src` into the queue; `device`: src is device memory, copied on `stream`.
  void post(const void* src, size_t bytes, bool device, gpu::Stream stream);
  // Throws InvalidArgument (naming `call` and `rank`) unless a message is queued and it has
  // `bytes` bytes: a receive with nothing sent before it could never complete. Call it before
  // waiting for anything, so that a refused call costs nothing.
  void check_take(size_t bytes, int rank, Collective call) const;
  // Moves the oldest message to `dst` (check_take passed); `device` as for post().
  void take(void* dst, size_t bytes, bool device, gpu::Stream stream);
  // Messages sent to self and not received yet.
  size_t pending() const { return queue_.size(); }

 private:
  std::deque<std::vector<std::byte>> queue_;
};

}  // namespace chorus
