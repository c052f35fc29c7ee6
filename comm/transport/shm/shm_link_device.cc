// chorus — the shm link's device-memory paths (shm_device.h, docs/GPU.md): device rendezvous
// pieces through IPC (from the link's outbox, or straight from registered memory), small device
// messages through the FIFO, host messages into device memory and device messages into host
// memory; and the transport's device context and registered memory.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "chorus/error.h"
#include "chorus/kernels/gpu.h"
#include "chorus/log.h"
#include "transport/shm/shm_cma.h"
#include "transport/shm/shm_link.h"
#include "transport/shm/shm_request.h"
#include "transport/shm/shm_slot.h"
#include "transport/shm/shm_transport.h"

namespace chorus::transport {

using shm::progress;

namespace {
constexpr auto kHostCopyTimeout = std::chrono::minutes(5);

// Checks a device rendezvous piece against the receive it lands in: the next bytes, in bounds.
void check_piece(const shm::DeviceRendezvous& d, const Request& r, int peer) {
  CHORUS_CHECK(d.piece_offset == progress(r).offset && d.piece_bytes > 0 &&
                   d.piece_bytes <= r.bytes - progress(r).offset,
               "device piece [", d.piece_offset, ", +", d.piece_bytes, ") from rank ", peer,
               " does not continue the ", r.bytes, "-byte message at ", progress(r).offset);
}
}  // namespace

using shm::payload;

ShmLink::~ShmLink() = default;

void ShmLink::leak_outbox() {
  if (outbox_) outbox_->buffer.leak();
}

ShmLink::Outbox& ShmLink::outbox() {
  if (outbox_) {
    CHORUS_CHECK_EQ(outbox_->device, device_->device, "outbox to rank ", peer_,
                    " is on another device");
    return *outbox_;
  }
  auto box = std::make_unique<Outbox>();
  try {
    box->buffer = gpu::DeviceBuffer(shm::OutboxChunks::kChunks * ipc_chunk_bytes_);
    box->handle = gpu::ipc_mem_handle(box->buffer.data());
  } catch (const Error& e) {
    throw Error(
        ErrorKind::kTransport,
        detail::concat("cannot make the device outbox for rank ", peer_, " (",
                       shm::OutboxChunks::kChunks, " x ", ipc_chunk_bytes_, " bytes on device ",
                       device_->device, "): ", e.message(),
                       "; lower CHORUS_GPU_IPC_CHUNK_BYTES, or set CHORUS_GPU_PATH=staging"),
        -1, {}, -1, peer_);
  }
  box->device = device_->device;
  box->chunks = shm::OutboxChunks(ipc_chunk_bytes_);
  outbox_ = std::move(box);
  return *outbox_;
}

// Sends from device memory: a message of at most one slot through the FIFO (copied out of the
// device), a larger one as device rendezvous pieces: straight from the caller's buffer when it is
// registered or the peer shares this process, else through the outbox.
bool ShmLink::send_device(Request& r) {
  if (progress(r).phase == kAwaitingAck || r.bytes == 0) return send_host(r);
  if (progress(r).phase == kThroughFifo) return send_eager<true>(r);
  if (progress(r).phase == kThroughOutbox) return send_through_outbox(r);
  if (r.bytes <= layout_.slot_bytes) {
    progress(r).phase = kThroughFifo;
    return send_eager<true>(r);
  }
  if (peer_pid_ == own_pid_ || owner_.registered_.contains(r.src, r.bytes))
    return send_device_direct(r);
  progress(r).phase = kThroughOutbox;
  return send_through_outbox(r);
}

bool ShmLink::send_device_direct(Request& r) {
  if (!slot_free()) return false;
  shm::DeviceRendezvous d;
  d.addr = reinterpret_cast<uint64_t>(r.src);
  d.device = device_->device;
  d.piece_bytes = r.bytes;
  if (peer_pid_ == own_pid_) {
    d.origin = shm::Origin::kSameProcess;
  } else {
    // Registration checked that IPC exports this memory.
    const gpu::AllocationRange range = gpu::allocation_range(r.src);
    d.handle = gpu::ipc_mem_handle(range.base);
    d.offset = static_cast<uint64_t>(r.src - static_cast<const std::byte*>(range.base));
    d.origin = shm::Origin::kRegistered;
    exported_ = true;
  }
  auto* h = slot_header(out_slots_, sent_);
  h->kind = shm::SlotKind::kDeviceRendezvous;
  h->total = r.bytes;
  h->stamp = r.stamp;
  shm::encode(d, h, payload(h));
  progress(r).token = ++rndv_sent_;
  progress(r).phase = kAwaitingAck;
  publish(h);
  peer_bell_.ring();
  return true;
}

// The message in pieces: each copied into a free chunk of the outbox on the communicator's
// stream, published once that copy has run, and the chunk reused once the receiver acknowledged
// it. Done when the last piece is acknowledged.
bool ShmLink::send_through_outbox(Request& r) {
  Outbox& box = outbox();
  bool moved = false;
  for (;;) {
    if (box.filling >= 0) {
      if (!box.filled.query() || !slot_free()) break;
      shm::DeviceRendezvous d;
      d.handle = box.handle;
      d.offset = box.chunks.offset_of(box.filling);
      d.addr = reinterpret_cast<uint64_t>(box.buffer.data()) + d.offset;
      d.piece_offset = box.filling_offset;
      d.piece_bytes = box.filling_bytes;
      d.device = box.device;
      d.origin = shm::Origin::kOutbox;
      auto* h = slot_header(out_slots_, sent_);
      h->kind = shm::SlotKind::kDeviceRendezvous;
      h->total = r.bytes;
      h->stamp = r.stamp;
      shm::encode(d, h, payload(h));
      box.chunks.carry(box.filling, ++rndv_sent_);
      progress(r).token = rndv_sent_;
      box.filling = -1;
      --owner_.device_copies_;
      exported_ = true;
      publish(h);
      moved = true;
      continue;
    }
    if (progress(r).offset < r.bytes) {
      const int chunk = box.chunks.next_free(out_ctrl_->rndv_done.load(std::memory_order_acquire));
      if (chunk < 0) break;
      const size_t n = box.chunks.piece_bytes(progress(r).offset, r.bytes);
      gpu::memcpy_async(static_cast<std::byte*>(box.buffer.data()) + box.chunks.offset_of(chunk),
                        r.src + progress(r).offset, n, device_->stream);
      box.filled.record(device_->stream);
      box.filling = chunk;
      box.filling_offset = progress(r).offset;
      box.filling_bytes = n;
      progress(r).offset += n;
      ++owner_.device_copies_;  // the copy ends without a peer ringing: poll
      moved = true;
      continue;
    }
    if (out_ctrl_->rndv_done.load(std::memory_order_acquire) >= progress(r).token) {
      r.done = true;
      moved = true;
    }
    break;
  }
  if (moved) peer_bell_.ring();
  return moved;
}

void ShmLink::copy_from_device(std::byte* slot, const std::byte* src, size_t n) {
  gpu::memcpy_async(slot, src, n, device_->stream);
  finish_device_work(*device_, sync_event());
}

// The peer's piece as this process addresses it on `device`: its own address between ranks of
// one process, else through the peer's allocation mapped on `device` (cached).
const std::byte* ShmLink::map_peer(const shm::DeviceRendezvous& d, int device) {
  if (d.origin == shm::Origin::kSameProcess) return reinterpret_cast<const std::byte*>(d.addr);
  CHORUS_CHECK(peer_pid_ != own_pid_ || d.origin == shm::Origin::kSameProcess,
               "device piece from rank ", peer_, " of this process names an IPC handle");
  shm::MappingKey key{d.handle.bytes, device};
  shm::PeerMapping* m = mappings_.find(key);
  if (m == nullptr) {
    try {
      m = &mappings_.insert(
          key, shm::PeerMapping{gpu::IpcMapping(d.handle), d.origin == shm::Origin::kRegistered});
    } catch (const Error& e) {
      throw Error(ErrorKind::kTransport,
                  detail::concat("cannot map rank ", peer_, "'s device memory (device ", d.device,
                                 ") on device ", device, ": ", e.message(),
                                 "; set CHORUS_GPU_PATH=staging to send device buffers through "
                                 "pinned host memory"),
                  -1, {}, -1, peer_);
    }
  }
  return static_cast<const std::byte*>(m->mapping.data()) + d.offset;
}

// Receives into device memory, from any kind of slot (the slot protocol: ShmLink::receive).
bool ShmLink::recv_device(Request& r) {
  if (progress(r).phase == kAwaitingCopy) {
    if (!copy_done_->query()) return false;
    --owner_.device_copies_;
    progress(r).phase = 0;
    acknowledge_piece(r, progress(r).token);
    return true;
  }
  return receive<true>(r, nullptr);
}

void ShmLink::receive_device_piece(Request& r, const shm::DeviceRendezvous& d) {
  check_piece(d, r, peer_);
  const std::byte* src = map_peer(d, device_->device);
  const size_t at = d.piece_offset;
  if (r.kind == Request::Kind::kRecv)
    gpu::memcpy_async(r.dst + at, src, d.piece_bytes, device_->stream);
  else
    kernels::gpu::reduce(r.dtype, r.op, r.dst + at, r.local + at, src,
                         d.piece_bytes / dtype_size(r.dtype), device_->stream);
  if (!copy_done_) copy_done_.emplace();
  copy_done_->record(device_->stream);
  progress(r).phase = kAwaitingCopy;
  progress(r).token = d.piece_bytes;  // acknowledged once the copy has run
  ++owner_.device_copies_;
}

// A rank with host buffers sent it: through host memory, then onto the device.
void ShmLink::receive_rendezvous_into_device(Request& r, uint64_t addr) {
  if (staging_.size() < kStagingBytes) staging_.resize(kStagingBytes);
  const size_t piece = kStagingBytes / 64 * 64;
  for (size_t off = 0; off < r.bytes; off += piece) {
    const size_t n = std::min(piece, r.bytes - off);
    if (int err = shm::cma_read(peer_pid_, staging_.data(), addr + off, n)) throw_copy_error(err);
    deliver_to_device(r, off, staging_.data(), n);
  }
}

// Host bytes into device memory (copy or reduce), finished before returning: `data` may be a
// FIFO slot that is handed back right after.
void ShmLink::deliver_to_device(Request& r, size_t offset, const std::byte* data, size_t n) {
  const gpu::Stream stream = device_->stream;
  if (r.kind == Request::Kind::kRecv) {
    gpu::memcpy_async(r.dst + offset, data, n, stream);
  } else {
    if (bounce_.bytes() < n) bounce_ = gpu::DeviceBuffer(std::max(n, kStagingBytes));
    gpu::memcpy_async(bounce_.data(), data, n, stream);
    kernels::gpu::reduce(r.dtype, r.op, r.dst + offset, r.local + offset, bounce_.data(),
                         n / dtype_size(r.dtype), stream);
  }
  finish_device_work(*device_, sync_event());
}

// Marks the end of this link's synchronous device work on the operation's stream.
gpu::Event& ShmLink::sync_event() {
  if (!sync_done_) sync_done_.emplace();
  return *sync_done_;
}

void ShmLink::receive_device_into_host(Request& r, const shm::DeviceRendezvous& d) {
  check_piece(d, r, peer_);
  // A host-memory receive of device memory may run on any thread.
  gpu::DeviceGuard on(d.device);
  // Bounded like any wait, though the operation's own deadline is not known here.
  const DeviceContext context{d.device, owner_.host_copy_stream(d.device),
                              std::chrono::steady_clock::now() + kHostCopyTimeout};
  gpu::Event done;
  const std::byte* src = map_peer(d, d.device);
  const size_t at = d.piece_offset;
  if (r.kind == Request::Kind::kRecv) {
    gpu::memcpy_async(r.dst + at, src, d.piece_bytes, context.stream);
    finish_device_work(context, done);
    return;
  }
  if (staging_.size() < kStagingBytes) staging_.resize(kStagingBytes);
  const size_t piece = kStagingBytes / 64 * 64;
  for (size_t off = 0; off < d.piece_bytes; off += piece) {
    const size_t n = std::min(piece, d.piece_bytes - off);
    gpu::memcpy_async(staging_.data(), src + off, n, context.stream);
    finish_device_work(context, done);
    shm::deliver(r, at + off, staging_.data(), n);
  }
}

void ShmTransport::set_device_memory(const DeviceContext* device) {
  if (device != nullptr && !device_ipc_)
    throw Error(ErrorKind::kTransport,
                "the shm transport cannot move device memory here: " + no_device_ipc_, rank_);
  if (device != nullptr) device_ = *device;
  device_op_ = device != nullptr;
  device_copies_ = 0;  // a failed operation may have left one unaccounted for
  for (auto& l : links_)
    if (l) l->set_device(device != nullptr ? &device_ : nullptr);
}

gpu::Stream ShmTransport::host_copy_stream(int device) {
  for (auto& [d, s] : host_copy_streams_)
    if (d == device) return s.get();
  host_copy_streams_.emplace_back(device, gpu::OwnedStream());
  return host_copy_streams_.back().second.get();
}

void ShmTransport::register_device_memory(const void* base, size_t bytes) {
  if (!device_ipc_) return;  // nothing is mapped: staging moves every device buffer
  try {
    const gpu::AllocationRange range = gpu::allocation_range(base);
    (void)gpu::ipc_mem_handle(range.base);
    CHORUS_ARG_CHECK(static_cast<const std::byte*>(base) + bytes <=
                         static_cast<const std::byte*>(range.base) + range.bytes,
                     "register_device_memory: [", base, ", +", bytes,
                     ") runs past the end of its allocation (", range.bytes, " bytes at ",
                     range.base, ")");
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Error& e) {
    throw InvalidArgument(
        detail::concat("register_device_memory: [", base, ", +", bytes,
                       ") cannot be shared with peers through IPC (", e.message(),
                       "): only plain device allocations (cudaMalloc / hipMalloc) can; other "
                       "memory goes through the communicator's own buffers unregistered"),
        rank_);
  }
  registered_.add(base, bytes);
}

bool ShmTransport::deregister_device_memory(const void* base) {
  const bool found = base == nullptr || registered_.remove(base);
  for (int p : members_)
    if (p != rank_ && links_[p]) links_[p]->close_registered_mappings();
  return found;
}

void ShmTransport::close_device_memory() noexcept {
  if (!device_ipc_ || links_.empty()) return;  // nothing was mapped or exported
  std::vector<int> waiting;
  for (int p : members_) {
    if (p == rank_ || !links_[p]) continue;
    links_[p]->close_mappings();
    if (links_[p]->exported()) waiting.push_back(p);
  }
  header()->ipc_closed.store(1, std::memory_order_release);
  if (waiting.empty()) return;
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      Clock::now() + (abandoned_ ? std::chrono::seconds(1) : std::chrono::seconds(10));
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    std::erase_if(waiting, [&](int p) {
      return peer_header(p).ipc_closed.load(std::memory_order_acquire) != 0 || !process_alive(p);
    });
    if (waiting.empty() || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  if (waiting.empty()) return;
  std::string who;
  for (int p : waiting) {
    links_[p]->leak_outbox();
    who += detail::concat(who.empty() ? "" : ", ", p);
  }
  CHORUS_WARN(kLogShm, "rank ", rank_, ": rank(s) ", who,
              " still map device memory of this rank at the communicator's end; its outbox to "
              "them stays allocated (registered memory must stay allocated too until they "
              "end)");
}

}  // namespace chorus::transport
