// chorus — point-to-point messages a rank sends to itself (send, recv and send_recv whose peer is
// this rank). They never reach a transport: a send to self copies the message into this queue
// and completes, a receive from self takes the oldest queued message of its tag, so self messages
// match by tag and order like those between two ranks. The caller (communicator.cc) orders them: it
// waits for the communicator's earlier operations, and for the stream of a stream-ordered call,
// first.
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
  void post(const void* src, size_t bytes, int tag, bool device, gpu::Stream stream);
  // Throws InvalidArgument (naming `call` and `rank`) unless a message of `tag` is queued and
  // the oldest has `bytes` bytes: a receive with nothing sent before it could never complete.
  // Call it before waiting for anything, so that a refused call costs nothing.
  void check_take(size_t bytes, int tag, int rank, Collective call) const;
  // Moves the oldest message of `tag` to `dst` (check_take passed); `device` as for post().
  void take(void* dst, size_t bytes, int tag, bool device, gpu::Stream stream);
  // Messages of `tag` sent to self and not received yet.
  size_t pending(int tag) const;

 private:
  struct Message {
    int tag;
    std::vector<std::byte> data;
  };
  std::deque<Message>::const_iterator oldest(int tag) const;
  std::deque<Message> queue_;
};

}  // namespace chorus
