// chorus — the shm link's slot FIFO (shm_layout.h): messages sent INLINE in a slot's header or
// EAGER through slots, the small-message path (send_now / recv_now) and the dispatch of every
// request to the path that carries it. The hot paths of the transport: everything they call on
// the way is inline (shm_link.h, shm_slot.h) or in this file.
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "chorus/error.h"
#include "transport/shm/shm_link.h"
#include "transport/shm/shm_request.h"
#include "transport/shm/shm_slot.h"
#include "transport/shm/shm_transport.h"

namespace chorus::transport {

using shm::payload;
using shm::progress;

ShmLink::ShmLink(ShmTransport& owner, int peer, pid_t peer_pid, const shm::Layout& layout,
                 std::byte* own_base, std::byte* peer_base, int rank,
                 std::vector<std::byte>& staging, size_t cma_threshold, size_t ipc_mappings,
                 size_t ipc_chunk_bytes, shm::FanBuffer::Reader& fan_in)
    : owner_(owner),
      peer_(peer),
      peer_pid_(peer_pid),
      layout_(layout),
      in_ctrl_(reinterpret_cast<shm::FifoCtrl*>(own_base + shm::Layout::kCtrlOffset) + peer),
      out_ctrl_(reinterpret_cast<shm::FifoCtrl*>(peer_base + shm::Layout::kCtrlOffset) + rank),
      in_slots_(own_base + layout.fifo_offset(peer)),
      out_slots_(peer_base + layout.fifo_offset(rank)),
      fan_in_(&fan_in),
      peer_header_(*reinterpret_cast<const shm::SegmentHeader*>(peer_base)),
      peer_bell_(reinterpret_cast<shm::SegmentHeader*>(peer_base)->bell),
      staging_(staging),
      cma_threshold_(cma_threshold),
      own_pid_(::getpid()),
      mappings_(ipc_mappings),
      ipc_chunk_bytes_(ipc_chunk_bytes) {}

bool ShmLink::progress_send(Request& r) {
  if (shm::shared(r)) [[unlikely]]
    return send_shared(r);
  if (device_ != nullptr) [[unlikely]]
    return send_device(r);
  return send_host(r);
}

bool ShmLink::progress_recv(Request& r, Request* forward_into) {
  if (shm::shared(r)) [[unlikely]]
    return recv_shared(r);
  if (device_ != nullptr) [[unlikely]]
    return recv_device(r);
  return receive<false>(r, forward_into);
}

bool ShmLink::send_now(const void* src, size_t bytes, const OpStamp& stamp) {
  if (device_ != nullptr || bytes > layout_.slot_bytes || bytes >= cma_threshold_ || !slot_free())
    return false;
  auto* h = slot_header(out_slots_, sent_);
  h->bytes = static_cast<uint32_t>(bytes);
  h->total = bytes;
  h->stamp = stamp;
  if (bytes <= shm::kInlineBytes) {
    h->kind = shm::SlotKind::kInline;
    std::memcpy(shm::inline_payload(h), src, bytes);
  } else {
    h->kind = shm::SlotKind::kEager;
    h->offset = 0;
    std::memcpy(payload(h), src, bytes);
  }
  publish(h);
  return true;
}

bool ShmLink::recv_now(void* dst, size_t bytes, const OpStamp& stamp) {
  if (device_ != nullptr) return false;
  const auto* h = slot_header(in_slots_, received_);
  if (h->seq.load(std::memory_order_acquire) != received_ + 1) return false;
  const std::byte* data;
  if (h->kind == shm::SlotKind::kInline)
    data = shm::inline_payload(h);
  else if (h->kind == shm::SlotKind::kEager && h->offset == 0 && h->bytes == h->total)
    data = payload(h);
  else
    return false;
  check_slot(h, stamp, bytes);
  std::memcpy(dst, data, bytes);
  consume_slot();
  peer_bell_.ring();  // the sender may wait for room
  return true;
}

bool ShmLink::send_host(Request& r) {
  if (progress(r).phase == kAwaitingAck) {
    const bool assisted = progress(r).assisted && assist(r);
    if (out_ctrl_->rndv_done.load(std::memory_order_acquire) < progress(r).token) return assisted;
    r.done = true;
    return true;
  }
  // A send that has begun through the FIFO (a forward) goes on there.
  if (r.bytes >= cma_threshold_ && single_copy_allowed_ && progress(r).offset == 0 && single_copy())
    return send_rendezvous(r);
  if (r.bytes <= shm::kInlineBytes && progress(r).offset == 0) {
    if (!slot_free()) return false;
    auto* h = slot_header(out_slots_, sent_);
    h->kind = shm::SlotKind::kInline;
    h->bytes = static_cast<uint32_t>(r.bytes);
    h->total = r.bytes;
    h->stamp = r.stamp;
    if (r.bytes > 0) std::memcpy(shm::inline_payload(h), r.src, r.bytes);
    publish(h);
    peer_bell_.ring();
    progress(r).offset = r.bytes;
    r.done = true;
    return true;
  }
  return send_eager<false>(r);
}

// The message through the slots, a slot's payload at a time, copied there from host memory or
// (kDevice) from the device memory of the operation.
template <bool kDevice>
bool ShmLink::send_eager(Request& r) {
  bool moved = false;
  while (progress(r).offset < r.bytes && slot_free()) {
    const size_t n = std::min(layout_.slot_bytes, r.bytes - progress(r).offset);
    auto* h = slot_header(out_slots_, sent_);
    eager_header(h, r, n);
    if constexpr (kDevice)
      copy_from_device(payload(h), r.src + progress(r).offset, n);
    else
      std::memcpy(payload(h), r.src + progress(r).offset, n);
    progress(r).offset += n;
    publish(h);
    moved = true;
  }
  if (moved) {
    peer_bell_.ring();
    r.done = progress(r).offset == r.bytes;
  }
  return moved;
}
template bool ShmLink::send_eager<true>(Request& r);

// The slot protocol of a receive, one for host and device memory (kDevice: the receive's memory
// is on the operation's device): takes the peer's slots in order, whatever their kind (a
// sender's memory may be host or device memory either way), and delivers each into the
// receive's memory. A host receive also forwards (forward_into) and shares a rendezvous copy.
template <bool kDevice>
bool ShmLink::receive(Request& r, Request* forward_into) {
  if (!kDevice && progress(r).phase == kAwaitingAssist) {
    if (!finish_assisted(r)) return false;
    acknowledge(r);
    return true;
  }
  // Forwarding: the link to the peer the result goes on to, when that peer is on this host too.
  ShmLink* out = nullptr;
  if (!kDevice && forward_into != nullptr && forward_into->peer != owner_.rank_) {
    out = owner_.links_[static_cast<size_t>(forward_into->peer)].get();
    if (out != nullptr && out->device_ != nullptr) out = nullptr;
  }
  bool moved = false, forwarded = false;
  for (;;) {
    if (r.done) break;
    if (out != nullptr && progress(*forward_into).offset < progress(r).offset)
      forwarded |= out->forward_received(r, *forward_into);
    const auto* h = slot_header(in_slots_, received_);
    if (h->seq.load(std::memory_order_acquire) != received_ + 1) break;
    check_slot(h, r);
    if (h->kind == shm::SlotKind::kRendezvous) {
      const uint64_t addr = h->addr;
      const bool assisted = h->offset == 1;
      consume_slot();
      if constexpr (kDevice) {
        receive_rendezvous_into_device(r, addr);  // never shares the copy
        acknowledge(r);
      } else if (receive_rendezvous(r, addr, assisted)) {
        acknowledge(r);
      }
      return true;
    }
    if (h->kind == shm::SlotKind::kDeviceRendezvous) [[unlikely]] {
      const shm::DeviceRendezvous d = shm::decode(h, payload(h));
      consume_slot();
      if constexpr (kDevice) {
        receive_device_piece(r, d);  // acknowledged once its copy has run
      } else {
        receive_device_into_host(r, d);
        acknowledge_piece(r, d.piece_bytes);
      }
      return true;
    }
    if (h->kind == shm::SlotKind::kInline) {
      if (r.bytes > 0) deliver_into<kDevice>(r, 0, shm::inline_payload(h), r.bytes);
      consume_slot();
      peer_bell_.ring();
      progress(r).offset = r.bytes;
      r.done = true;
      return true;
    }
    CHORUS_CHECK_EQ(h->offset, progress(r).offset, "eager slot out of order from rank ", peer_);
    if (out != nullptr && progress(*forward_into).offset == progress(r).offset &&
        out->slot_free()) {
      out->forward_piece(r, *forward_into, payload(h), h->bytes);
      forwarded = true;
    } else {
      deliver_into<kDevice>(r, progress(r).offset, payload(h), h->bytes);
    }
    progress(r).offset += h->bytes;
    consume_slot();
    moved = true;
    r.done = progress(r).offset == r.bytes;
  }
  // The sender may be waiting for room in the FIFO; the forward's receiver for data.
  if (moved) peer_bell_.ring();
  if (forwarded) out->peer_bell_.ring();
  return moved || forwarded;
}
template bool ShmLink::receive<true>(Request& r, Request* forward_into);

}  // namespace chorus::transport
