// chorus — a rank's fan-out buffer (shm_layout.h; Request::kShared): the writer, this rank, that
// writes each piece of a message once, and its readers, which copy pieces out of the peers'
// buffers.
//
// Writer: the sends of one message, one to each peer, join the message being written (join),
// and any of them writes as many pieces as the slowest reader has made room for (fill). A send
// is done once its message's last piece is published (written). Reader: one per peer, its
// position in that peer's buffer, advanced by posted shared receives (recv) and by the
// small-message path (recv_now).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "transport/futex.h"
#include "transport/shm/shm_layout.h"
#include "transport/shm/shm_slot.h"
#include "transport/transport.h"

namespace chorus::transport::shm {

class FanBuffer {
 public:
  // This rank's position in one peer's fan buffer.
  struct Reader {
    int peer = -1;
    uint64_t capacity = 0;
    const std::byte* slots = nullptr;  // the peer's shared buffer
    FanCtrl* ctrl = nullptr;           // this rank's position in it, in the peer's segment
    Doorbell* writer_bell = nullptr;   // the peer's: it may wait for room
    uint64_t received = 0;             // bytes of the peer's fan buffer this rank has read past

    // Copies the peer's fan-buffer pieces in order into the receive's destination; the peer
    // may write over them once every reader has moved its position past them.
    bool recv(Request& r);
    // The peer's next shared message if it is here whole, in one piece (Link::fan_recv_now). A
    // skip before it is read past: a posted receive would do the same.
    bool recv_now(void* dst, size_t bytes, const OpStamp& stamp);
  };

  FanBuffer() = default;
  // `own_base`: this rank's mapped segment; `bases`: every member's (this rank's own included),
  // indexed by rank, null for ranks not in `members`.
  FanBuffer(const Layout& layout, int rank, const std::vector<int>& members,
            const std::vector<std::byte*>& bases);

  Reader& reader(int peer) { return readers_[static_cast<size_t>(peer)]; }

  // A shared send joins the message being written, or begins the next one (token: its number).
  void join(Request& r);
  // Writes as many pieces as the slowest reader leaves room for; rings the readers if any.
  bool fill();
  bool written(const Request& r) const {
    return fan_.number > progress(r).token ||
           (fan_.number == progress(r).token && fan_.written == fan_.bytes);
  }
  // The small-message path (Transport::fan_send_now): a whole message in one piece, or false.
  bool send_now(const void* src, size_t bytes, void* copy_to, const OpStamp& stamp);
  // A failed operation may have left a message half written: nothing goes on reading its source.
  void abandon() { fan_ = Message{}; }

 private:
  struct Message {
    const std::byte* src = nullptr;
    std::byte* copy_to = nullptr;  // Request::dst of the sends: the writer's own copy
    bool stream = false;
    size_t bytes = 0;
    OpStamp stamp;
    size_t written = 0;   // bytes published
    uint64_t number = 0;  // messages begun before it + 1
    int joined = 0;       // sends that joined it
  };
  uint64_t consumed(int peer) const { return ctrl_[peer].tail.load(std::memory_order_acquire); }
  // Publishes a piece of `bytes` (header included, a multiple of 64) at pos_, whose header the
  // caller has filled but for `seq`.
  void publish(SlotHeader* h, uint64_t bytes);
  // The header of the next piece of `piece` bytes (header included, a multiple of 64), after a
  // skip to the ring's start where it would not fit before the end; null while the slowest
  // reader leaves no room for it.
  SlotHeader* reserve(uint64_t piece);
  SlotHeader* at(uint64_t pos) const {
    return reinterpret_cast<SlotHeader*>(slots_ + pos % layout_.fan_capacity());
  }

  Layout layout_{};
  int rank_ = -1;
  std::vector<int> members_;
  FanCtrl* ctrl_ = nullptr;  // in this rank's segment: each reader's position
  std::byte* slots_ = nullptr;
  std::vector<Doorbell*> reader_bells_;  // of the peers in members_
  Message fan_;
  uint64_t messages_ = 0;        // messages begun
  uint64_t pos_ = 0;             // bytes of the fan buffer published
  uint64_t min_tail_ = 0;        // the slowest reader's position, as last read
  std::vector<Reader> readers_;  // per rank
};

// Inline: the small-message path runs on every call of a small broadcast or all-gather.
inline bool FanBuffer::Reader::recv_now(void* dst, size_t bytes, const OpStamp& stamp) {
  constexpr uint64_t kLine = sizeof(SlotHeader);
  uint64_t at = received % capacity;
  const auto* h = reinterpret_cast<const SlotHeader*>(slots + at);
  if (h->seq.load(std::memory_order_acquire) != received + 1) return false;
  if (h->kind == SlotKind::kSkip) {
    received += capacity - at;
    ctrl->tail.store(received, std::memory_order_release);
    at = 0;
    h = reinterpret_cast<const SlotHeader*>(slots);
    if (h->seq.load(std::memory_order_acquire) != received + 1) return false;
  }
  const std::byte* data;
  uint64_t piece = kLine;
  if (h->kind == SlotKind::kInline) {
    data = inline_payload(h);
  } else if (h->kind == SlotKind::kEager && h->offset == 0 && h->bytes == h->total) {
    data = payload(h);
    piece += (h->bytes + kLine - 1) / kLine * kLine;
  } else {
    return false;
  }
  check_slot(h, stamp, bytes, peer);
  std::memcpy(dst, data, bytes);
  received += piece;
  ctrl->tail.store(received, std::memory_order_release);
  writer_bell->ring();  // the writer may wait for room
  __builtin_prefetch(slots + received % capacity);
  return true;
}

}  // namespace chorus::transport::shm
