// chorus — the shm link's slot FIFO (shm_layout.h): messages sent INLINE in a slot's header or
// EAGER through slots, the small-message path (send_now / recv_now) and the dispatch of every
// request to the path that carries it. The hot paths of the transport: everything they call on
// the way is inline (shm_link.h, shm_slot.h) or in this file.
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "chorus/error.h"
#include "transport/shm/shm_link.h"
#include "transport/shm/shm_slot.h"
#include "transport/shm/shm_transport.h"

namespace chorus::transport {

using shm::deliver;
using shm::payload;

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
  if (r.shared) [[unlikely]]
    return send_shared(r);
  if (device_ != nullptr) [[unlikely]]
    return send_device(r);
  return send_host(r);
}

bool ShmLink::progress_recv(Request& r) {
  if (r.shared) [[unlikely]]
    return recv_shared(r);
  if (device_ != nullptr) [[unlikely]]
    return recv_device(r);
  return recv_host(r);
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
  if (r.progress.phase == kAwaitingAck) {
    const bool assisted = r.assist && assist(r);
    if (out_ctrl_->rndv_done.load(std::memory_order_acquire) < r.progress.token) return assisted;
    r.done = true;
    return true;
  }
  if (r.bytes >= cma_threshold_ && !r.fifo_only && single_copy()) return send_rendezvous(r);
  if (r.bytes <= shm::kInlineBytes && r.progress.offset == 0) {
    if (!slot_free()) return false;
    auto* h = slot_header(out_slots_, sent_);
    h->kind = shm::SlotKind::kInline;
    h->bytes = static_cast<uint32_t>(r.bytes);
    h->total = r.bytes;
    h->stamp = r.stamp;
    if (r.bytes > 0) std::memcpy(shm::inline_payload(h), r.src, r.bytes);
    publish(h);
    peer_bell_.ring();
    r.progress.offset = r.bytes;
    r.done = true;
    return true;
  }
  bool moved = false;
  while (r.progress.offset < r.bytes && slot_free()) {
    const size_t n = std::min(layout_.slot_bytes, r.bytes - r.progress.offset);
    auto* h = slot_header(out_slots_, sent_);
    h->kind = shm::SlotKind::kEager;
    h->bytes = static_cast<uint32_t>(n);
    h->total = r.bytes;
    h->offset = r.progress.offset;
    h->stamp = r.stamp;
    std::memcpy(payload(h), r.src + r.progress.offset, n);
    r.progress.offset += n;
    publish(h);
    moved = true;
  }
  if (moved) {
    peer_bell_.ring();
    r.done = r.progress.offset == r.bytes;
  }
  return moved;
}

bool ShmLink::recv_host(Request& r) {
  if (r.progress.phase == kAwaitingAssist) {
    if (!finish_assisted(r)) return false;
    acknowledge(r);
    return true;
  }
  // Forwarding: the link to the peer the result goes on to, when that peer is on this host too.
  ShmLink* out = nullptr;
  if (r.forward_now && r.forward->peer != owner_.rank_) {
    out = owner_.links_[static_cast<size_t>(r.forward->peer)].get();
    if (out != nullptr && out->device_ != nullptr) out = nullptr;
  }
  bool moved = false, forwarded = false;
  for (;;) {
    if (r.done) break;
    if (out != nullptr && r.forward->progress.offset < r.progress.offset)
      forwarded |= out->forward_received(r);
    const auto* h = slot_header(in_slots_, received_);
    if (h->seq.load(std::memory_order_acquire) != received_ + 1) break;
    check_slot(h, r);
    if (h->kind == shm::SlotKind::kRendezvous) {
      const uint64_t addr = h->addr;
      const bool assisted = h->offset == 1;
      consume_slot();
      if (receive_rendezvous(r, addr, assisted)) acknowledge(r);
      return true;
    }
    if (h->kind == shm::SlotKind::kDeviceRendezvous) [[unlikely]] {
      const shm::DeviceRendezvous d = shm::decode(h, payload(h));
      consume_slot();
      receive_device_into_host(r, d);
      acknowledge_piece(r, d.piece_bytes);
      return true;
    }
    if (h->kind == shm::SlotKind::kInline) {
      if (r.bytes > 0) deliver(r, 0, shm::inline_payload(h), r.bytes);
      consume_slot();
      peer_bell_.ring();
      r.progress.offset = r.bytes;
      r.done = true;
      return true;
    }
    CHORUS_CHECK_EQ(h->offset, r.progress.offset, "eager slot out of order from rank ", peer_);
    if (out != nullptr && r.forward->progress.offset == r.progress.offset && out->slot_free()) {
      out->forward_piece(r, payload(h), h->bytes);
      forwarded = true;
    } else {
      deliver(r, r.progress.offset, payload(h), h->bytes);
    }
    r.progress.offset += h->bytes;
    consume_slot();
    moved = true;
    r.done = r.progress.offset == r.bytes;
  }
  // The sender may be waiting for room in the FIFO; the forward's receiver for data.
  if (moved) peer_bell_.ring();
  if (forwarded) out->peer_bell_.ring();
  return moved || forwarded;
}

}  // namespace chorus::transport
