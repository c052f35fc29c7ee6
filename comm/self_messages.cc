// Point-to-point messages to self: a FIFO of copies (see self_messages.h).
#include "self_messages.h"

#include <cstring>
#include <string>

#include "chorus/error.h"

namespace chorus {

namespace {
void copy(void* dst, const void* src, size_t bytes, bool device, gpu::Stream stream) {
  if (bytes == 0) return;
  if (!device) {
    std::memcpy(dst, src, bytes);
    return;
  }
  // The queue's memory is ordinary host memory: the copy is waited for before it is used or
  // freed.
  gpu::memcpy_async(dst, src, bytes, stream);
  gpu::stream_synchronize(stream);
}
}  // namespace

void SelfMessages::post(const void* src, size_t bytes, bool device, gpu::Stream stream) {
  std::vector<std::byte> message(bytes);
  copy(message.data(), src, bytes, device, stream);
  queue_.push_back(std::move(message));
}

void SelfMessages::check_take(size_t bytes, int rank, Collective call) const {
  const std::string name(to_string(call));
  if (queue_.empty())
    throw InvalidArgument(
        detail::concat(name, ": receive from self (rank ", rank,
                       ") with no message sent to self before it; issue the send first (or use "
                       "send_recv with this rank as both peers)"),
        rank, name);
  if (queue_.front().size() != bytes)
    throw InvalidArgument(
        detail::concat(name, ": receive from self of ", bytes,
                       " bytes, but the message sent to self is ", queue_.front().size(), " bytes"),
        rank, name);
}

void SelfMessages::take(void* dst, size_t bytes, bool device, gpu::Stream stream) {
  copy(dst, queue_.front().data(), bytes, device, stream);
  queue_.pop_front();
}

}  // namespace chorus
