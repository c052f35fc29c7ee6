// Point-to-point messages to self: a FIFO of copies (see self_messages.h).
#include "self_messages.h"

#include <algorithm>
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

void SelfMessages::post(const void* src, size_t bytes, int tag, bool device, gpu::Stream stream) {
  Message message{tag, std::vector<std::byte>(bytes)};
  copy(message.data.data(), src, bytes, device, stream);
  queue_.push_back(std::move(message));
}

std::deque<SelfMessages::Message>::const_iterator SelfMessages::oldest(int tag) const {
  return std::find_if(queue_.begin(), queue_.end(), [&](const Message& m) { return m.tag == tag; });
}

size_t SelfMessages::pending(int tag) const {
  return static_cast<size_t>(
      std::count_if(queue_.begin(), queue_.end(), [&](const Message& m) { return m.tag == tag; }));
}

void SelfMessages::check_take(size_t bytes, int tag, int rank, Collective call) const {
  const std::string name(to_string(call));
  const auto it = oldest(tag);
  if (it == queue_.end())
    throw InvalidArgument(
        detail::concat(name, ": receive from self (rank ", rank,
                       ") with no message sent to self before it (with tag ", tag,
                       "); issue the send first (or use send_recv with this rank as both peers)"),
        rank, name);
  if (it->data.size() != bytes)
    throw InvalidArgument(detail::concat(name, ": receive from self of ", bytes,
                                         " bytes, but the message sent to self (tag ", tag, ") is ",
                                         it->data.size(), " bytes"),
                          rank, name);
}

void SelfMessages::take(void* dst, size_t bytes, int tag, bool device, gpu::Stream stream) {
  const auto it = oldest(tag);
  copy(dst, it->data.data(), bytes, device, stream);
  queue_.erase(it);
}

}  // namespace chorus
