// chorus — one peer of the shm transport: this rank writes into the FIFO for it in the peer's
// segment and reads the FIFO for the peer in its own.
//
// The link's work is spread over the files of shm/ by concept, all of them members of this one
// class so that each reaches the FIFO it moves bytes through: the slot FIFO, its protocol for
// host and device memory alike, and the small-message path (shm_fifo.cc), the single-copy
// rendezvous and the shared copy (shm_rendezvous.cc), forwarding (shm_forward.cc), the fan-out
// buffer (shm_fan.cc) and what only device memory does (shm_link_device.cc). The FIFO's own
// bookkeeping (a slot's place, whether one is free, publishing and consuming) is inline here:
// every one of those files writes or reads slots.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "chorus/gpu/runtime.h"
#include "transport/futex.h"
#include "transport/shm/shm_device.h"
#include "transport/shm/shm_fan.h"
#include "transport/shm/shm_layout.h"
#include "transport/shm/shm_request.h"
#include "transport/transport.h"

namespace chorus::transport {

class ShmTransport;

class ShmLink : public Link {
 public:
  ShmLink(ShmTransport& owner, int peer, pid_t peer_pid, const shm::Layout& layout,
          std::byte* own_base, std::byte* peer_base, int rank, std::vector<std::byte>& staging,
          size_t cma_threshold, size_t ipc_mappings, size_t ipc_chunk_bytes,
          shm::FanBuffer::Reader& fan_in);
  ~ShmLink() override;  // shm_link_device.cc

  // The device context of the operation being run (null: host memory); see Transport.
  void set_device(const DeviceContext* device) { device_ = device; }
  // Whether sends of the operation may go single copy (Transport::set_single_copy).
  void set_single_copy(bool allowed) { single_copy_allowed_ = allowed; }

  bool single_copy() const { return out_ctrl_->cma_ok.load(std::memory_order_acquire) != 0; }

  bool progress_send(Request& r) override;
  bool progress_recv(Request& r, Request* forward_into) override;
  bool peek(OpStamp& stamp) override {
    const auto* h = slot_header(in_slots_, received_);
    if (h->seq.load(std::memory_order_acquire) != received_ + 1) return false;
    stamp = h->stamp;
    return true;
  }
  // A message that fits one slot (INLINE, or EAGER in one piece) with none of a Request's
  // bookkeeping. Sizes that go single copy (CHORUS_SHM_CMA_THRESHOLD) stay with the requests.
  bool send_now(const void* src, size_t bytes, const OpStamp& stamp) override;
  void notify() override { peer_bell_.ring(); }
  bool recv_now(void* dst, size_t bytes, const OpStamp& stamp) override;
  void put(const void* src, uint64_t remote, size_t bytes) override;
  bool fan_recv_now(void* dst, size_t bytes, const OpStamp& stamp) override;

  // Device memory at the transport's end (shm_device.h): closes every peer allocation mapped
  // here; whether this rank sent the peer device memory of its own to map; and, when the peer
  // never closed its mappings, keeps the outbox allocated rather than free memory it may map.
  void close_mappings() { mappings_.clear(); }
  void close_registered_mappings() {
    mappings_.erase_if([](const shm::PeerMapping& m) { return m.registered; });
  }
  bool exported() const { return exported_; }
  void leak_outbox();

 private:
  // ---- the slot FIFO (shm_fifo.cc) --------------------------------------------------------------
  bool send_host(Request& r);
  // The slot protocol of eager sends and of receives, one for host and device memory (kDevice:
  // the request's memory is on the operation's device; instantiated for both in shm_fifo.cc).
  template <bool kDevice>
  bool send_eager(Request& r);
  template <bool kDevice>
  bool receive(Request& r, Request* forward_into);
  // The eager slot h of n bytes at progress(r).offset of r, but its payload.
  void eager_header(shm::SlotHeader* h, const Request& r, size_t n) const {
    h->kind = shm::SlotKind::kEager;
    h->bytes = static_cast<uint32_t>(n);
    h->total = r.bytes;
    h->offset = shm::progress(r).offset;
    h->stamp = r.stamp;
  }
  // n incoming bytes at `offset` of the message into the receive's memory (copy or reduce).
  template <bool kDevice>
  void deliver_into(Request& r, size_t offset, const std::byte* data, size_t n) {
    if constexpr (kDevice)
      deliver_to_device(r, offset, data, n);
    else
      shm::deliver(r, offset, data, n);
  }

  // ---- the shared buffer (shm_fan.cc) -----------------------------------------------------------
  bool send_shared(Request& r);
  bool recv_shared(Request& r);

  // ---- forwarding (Request::forward; shm_forward.cc), called on the link the result goes out on
  void publish_forward(Request& f, shm::SlotHeader* h, size_t n);
  bool forward_received(const Request& in, Request& f);
  void forward_piece(Request& in, Request& f, const std::byte* data, size_t n);

  // ---- the single-copy rendezvous and the shared copy (shm_rendezvous.cc) -----------------------
  // Publishes a rendezvous slot for a send that goes single copy; false when the FIFO is full.
  bool send_rendezvous(Request& r);
  bool receive_rendezvous(Request& r, uint64_t addr, bool assisted);
  bool assist(Request& r);
  bool finish_assisted(Request& r);
  [[noreturn]] void throw_copy_error(int err, bool write = false) const;

  // ---- device memory (shm_device.h; shm_link_device.cc) -----------------------------------------
  bool send_device(Request& r);
  // n bytes of device memory into a slot's payload, finished before returning.
  void copy_from_device(std::byte* slot, const std::byte* src, size_t n);
  // Publishes the whole message as one piece read straight from the caller's buffer (registered
  // memory, or a peer in this process).
  bool send_device_direct(Request& r);
  bool send_through_outbox(Request& r);
  // The link's outbox (shm_device.h): device memory for the pieces of messages to the peer,
  // exported once; the copy into the chunk being filled; that chunk's place and piece.
  struct Outbox {
    gpu::DeviceBuffer buffer;
    gpu::IpcMemHandle handle;
    int device = -1;
    shm::OutboxChunks chunks;
    gpu::Event filled;  // ends the copy into chunk `filling`
    int filling = -1;   // the chunk whose copy is queued and whose piece is not yet published
    size_t filling_offset = 0, filling_bytes = 0;  // that piece, in its message
  };
  Outbox& outbox();
  const std::byte* map_peer(const shm::DeviceRendezvous& d, int device);
  bool recv_device(Request& r);
  // A device receive's pieces of the kinds a host receive does not see: a host rendezvous read
  // through staging memory; a device rendezvous piece, whose copy (or reduction) is queued.
  void receive_rendezvous_into_device(Request& r, uint64_t addr);
  void receive_device_piece(Request& r, const shm::DeviceRendezvous& d);
  // A piece of a device rendezvous is in place: the sender may reuse its memory.
  void acknowledge_piece(Request& r, size_t bytes) {
    in_ctrl_->rndv_done.fetch_add(1, std::memory_order_release);
    peer_bell_.ring();
    shm::progress(r).offset += bytes;
    r.done = shm::progress(r).offset == r.bytes;
  }
  void deliver_to_device(Request& r, size_t offset, const std::byte* data, size_t n);
  gpu::Event& sync_event();
  // A device rendezvous received into host memory (this rank passed host buffers): copied out on
  // the sender's device, reduced on the CPU.
  void receive_device_into_host(Request& r, const shm::DeviceRendezvous& d);

  static constexpr uint8_t kAwaitingAck = 1;
  static constexpr uint8_t kAwaitingCopy = 2;  // receive: the device copy / reduce is queued
  static constexpr uint8_t kThroughFifo = 3;   // send: a small device message, through the slots
  static constexpr uint8_t kFanning = 4;  // shared send: joined its message (token: its number)
  // Receive of an assisted rendezvous (token: its number, addr: the message in the sender's
  // memory): the sender writes its part.
  static constexpr uint8_t kAwaitingAssist = 5;
  static constexpr uint8_t kThroughOutbox = 6;  // send: device memory in pieces through the outbox

  // From this size a receive shares the copy with a sender that offers to (the second system
  // call and the hand-shake cost about what a 64 KiB copy does).
  static constexpr size_t kAssistFromBytes = 256 << 10;
  static constexpr size_t kRotateFromBytes = 256 << 10;
  // Rendezvous reduce and device copies into host memory go through a staging buffer this large.
  static constexpr size_t kStagingBytes = 256 << 10;

  void check_slot(const shm::SlotHeader* h, const Request& r) const {
    shm::check_slot(h, r.stamp, r.bytes, peer_);
  }
  void check_slot(const shm::SlotHeader* h, const OpStamp& stamp, size_t bytes) const {
    shm::check_slot(h, stamp, bytes, peer_);
  }

  // A rendezvous read is finished: the sender's send completes.
  void acknowledge(Request& r) {
    in_ctrl_->rndv_done.fetch_add(1, std::memory_order_release);
    peer_bell_.ring();
    r.done = true;
  }

  shm::SlotHeader* slot_header(std::byte* fifo, uint64_t index) const {
    return reinterpret_cast<shm::SlotHeader*>(fifo +
                                              (index % layout_.depth) * layout_.slot_stride());
  }

  // Whether the next slot is free; reads the receiver's tail only when the cached one says full.
  bool slot_free() {
    if (sent_ - tail_seen_ < layout_.depth) return true;
    tail_seen_ = out_ctrl_->tail.load(std::memory_order_acquire);
    return sent_ - tail_seen_ < layout_.depth;
  }
  void publish(shm::SlotHeader* h) {
    ++sent_;
    h->seq.store(sent_, std::memory_order_release);
  }
  void consume_slot() {
    ++received_;
    in_ctrl_->tail.store(received_, std::memory_order_release);
    // A sender that runs ahead (a broadcast root, a reduce's leaves) has often written the next
    // header already: its line then travels while this rank returns and makes the next call.
    // 8-byte broadcast and reduce at np=2: 0.37 and 0.41 -> 0.34 and 0.35 us over four
    // alternations; all-reduce, where the next header is not written yet, level.
    __builtin_prefetch(slot_header(in_slots_, received_));
  }

  ShmTransport& owner_;
  int peer_;
  pid_t peer_pid_;
  shm::Layout layout_;
  shm::FifoCtrl* in_ctrl_;
  shm::FifoCtrl* out_ctrl_;
  std::byte* in_slots_;
  std::byte* out_slots_;
  shm::FanBuffer::Reader* fan_in_;         // this rank's place in the peer's shared buffer
  const shm::SegmentHeader& peer_header_;  // stays mapped after the peer's process ends
  Doorbell& peer_bell_;
  std::vector<std::byte>& staging_;
  size_t cma_threshold_;
  bool single_copy_allowed_ = true;
  uint64_t sent_ = 0;       // slots this rank published to the peer
  uint64_t tail_seen_ = 0;  // the receiver's tail as last read
  uint64_t received_ = 0;   // slots this rank consumed from the peer
  uint64_t rndv_sent_ = 0;  // rendezvous messages this rank sent to the peer
  // Device memory: the operation's context (null: host), the event that ends a queued device
  // copy, the peer's allocations mapped here, and device memory for reducing host messages.
  const DeviceContext* device_ = nullptr;
  pid_t own_pid_;
  std::optional<gpu::Event> copy_done_;  // made at the first device copy (needs a device)
  std::optional<gpu::Event> sync_done_;
  shm::LruCache<shm::MappingKey, shm::PeerMapping> mappings_;
  gpu::DeviceBuffer bounce_;
  size_t ipc_chunk_bytes_;
  std::unique_ptr<Outbox> outbox_;  // made at the first piece sent through it
  bool exported_ = false;           // a piece of this rank's device memory went to the peer
};

}  // namespace chorus::transport
