// chorus — the shm link's device-memory paths (shm_device.h, docs/GPU.md): device rendezvous
// through IPC, device memory through the FIFO where it cannot be exported, host messages into
// device memory and device messages into host memory; and the transport's device context.
#include <algorithm>
#include <chrono>

#include "chorus/error.h"
#include "chorus/kernels/gpu.h"
#include "chorus/log.h"
#include "transport/shm/shm_cma.h"
#include "transport/shm/shm_link.h"
#include "transport/shm/shm_slot.h"
#include "transport/shm/shm_transport.h"

namespace chorus::transport {
namespace {
constexpr auto kHostCopyTimeout = std::chrono::minutes(5);
}  // namespace

using shm::payload;

// Sends from device memory: every non-empty message is a device rendezvous, or, from memory
// the runtime cannot export (managed memory, memory pools), eager slots copied out of the
// device.
bool ShmLink::send_device(Request& r) {
  if (r.progress.phase == kAwaitingAck || r.bytes == 0) return send_host(r);
  if (r.progress.phase == kThroughFifo) return send_device_through_fifo(r);
  if (!slot_free()) return false;
  shm::DeviceRendezvous d;
  d.addr = reinterpret_cast<uint64_t>(r.src);
  d.device = device_->device;
  if (peer_pid_ != own_pid_) {
    try {
      const gpu::AllocationRange range = gpu::allocation_range(r.src);
      d.handle = gpu::ipc_mem_handle(range.base);
      d.offset = static_cast<uint64_t>(r.src - static_cast<const std::byte*>(range.base));
    } catch (const Error& e) {
      CHORUS_INFO(kLogShm, "to rank ", peer_,
                  " through the FIFO (unshareable device memory: ", e.message(), ")");
      r.progress.phase = kThroughFifo;
      return send_device_through_fifo(r);
    }
  }
  auto* h = slot_header(out_slots_, sent_);
  h->kind = shm::SlotKind::kDeviceRendezvous;
  h->total = r.bytes;
  h->stamp = r.stamp;
  shm::encode(d, h, payload(h));
  r.progress.token = ++rndv_sent_;
  r.progress.phase = kAwaitingAck;
  publish(h);
  peer_bell_.ring();
  return true;
}

bool ShmLink::send_device_through_fifo(Request& r) {
  bool moved = false;
  while (r.progress.offset < r.bytes && slot_free()) {
    const size_t n = std::min(layout_.slot_bytes, r.bytes - r.progress.offset);
    auto* h = slot_header(out_slots_, sent_);
    h->kind = shm::SlotKind::kEager;
    h->bytes = static_cast<uint32_t>(n);
    h->total = r.bytes;
    h->offset = r.progress.offset;
    h->stamp = r.stamp;
    gpu::memcpy_async(payload(h), r.src + r.progress.offset, n, device_->stream);
    finish_device_work(*device_, sync_event());
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

// The peer's message as this process addresses it on `device`: its own address between ranks
// of one process, else through the peer's allocation mapped on `device` (cached).
const std::byte* ShmLink::map_peer(const shm::DeviceRendezvous& d, int device) {
  if (peer_pid_ == own_pid_) return reinterpret_cast<const std::byte*>(d.addr);
  shm::MappingKey key{d.handle.bytes, device};
  gpu::IpcMapping* m = mappings_.find(key);
  if (m == nullptr) {
    try {
      m = &mappings_.insert(key, gpu::IpcMapping(d.handle));
    } catch (const Error& e) {
      throw Error(ErrorKind::kTransport,
                  detail::concat("cannot map rank ", peer_, "'s device memory (device ", d.device,
                                 ") on device ", device, ": ", e.message(),
                                 "; set CHORUS_GPU_PATH=staging to send device buffers through "
                                 "pinned host memory"),
                  -1, {}, -1, peer_);
    }
  }
  return static_cast<const std::byte*>(m->data()) + d.offset;
}

// Receives into device memory, from any kind of slot.
bool ShmLink::recv_device(Request& r) {
  if (r.progress.phase == kAwaitingCopy) {
    if (!copy_done_->query()) return false;
    --owner_.device_copies_;
    acknowledge(r);
    return true;
  }
  bool moved = false;
  while (!r.done) {
    const auto* h = slot_header(in_slots_, received_);
    if (h->seq.load(std::memory_order_acquire) != received_ + 1) break;
    check_slot(h, r);
    if (h->kind == shm::SlotKind::kDeviceRendezvous) {
      const shm::DeviceRendezvous d = shm::decode(h, payload(h));
      consume_slot();
      const std::byte* src = map_peer(d, device_->device);
      if (r.kind == Request::Kind::kRecv)
        gpu::memcpy_async(r.dst, src, r.bytes, device_->stream);
      else
        kernels::gpu::reduce(r.dtype, r.op, r.dst, r.local, src, r.bytes / dtype_size(r.dtype),
                             device_->stream);
      if (!copy_done_) copy_done_.emplace();
      copy_done_->record(device_->stream);
      r.progress.phase = kAwaitingCopy;
      ++owner_.device_copies_;
      return true;
    }
    // A rank with host buffers sent it: through host memory, then onto the device.
    if (h->kind == shm::SlotKind::kRendezvous) {
      const uint64_t addr = h->addr;
      consume_slot();
      if (staging_.size() < kStagingBytes) staging_.resize(kStagingBytes);
      const size_t piece = kStagingBytes / 64 * 64;
      for (size_t off = 0; off < r.bytes; off += piece) {
        const size_t n = std::min(piece, r.bytes - off);
        if (int err = shm::cma_read(peer_pid_, staging_.data(), addr + off, n))
          throw_copy_error(err);
        deliver_to_device(r, off, staging_.data(), n);
      }
      acknowledge(r);
      return true;
    }
    if (h->kind == shm::SlotKind::kInline) {
      if (r.bytes > 0) deliver_to_device(r, 0, shm::inline_payload(h), r.bytes);
      consume_slot();
      peer_bell_.ring();
      r.progress.offset = r.bytes;
      r.done = true;
      return true;
    }
    CHORUS_CHECK_EQ(h->offset, r.progress.offset, "eager slot out of order from rank ", peer_);
    deliver_to_device(r, r.progress.offset, payload(h), h->bytes);
    r.progress.offset += h->bytes;
    consume_slot();
    moved = true;
    r.done = r.progress.offset == r.bytes;
  }
  if (moved) peer_bell_.ring();
  return moved;
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
  // A host-memory receive of device memory may run on any thread.
  gpu::DeviceGuard on(d.device);
  // Bounded like any wait, though the operation's own deadline is not known here.
  const DeviceContext context{d.device, owner_.host_copy_stream(d.device),
                              std::chrono::steady_clock::now() + kHostCopyTimeout};
  gpu::Event done;
  const std::byte* src = map_peer(d, d.device);
  if (r.kind == Request::Kind::kRecv) {
    gpu::memcpy_async(r.dst, src, r.bytes, context.stream);
    finish_device_work(context, done);
    return;
  }
  if (staging_.size() < kStagingBytes) staging_.resize(kStagingBytes);
  const size_t piece = kStagingBytes / 64 * 64;
  for (size_t off = 0; off < r.bytes; off += piece) {
    const size_t n = std::min(piece, r.bytes - off);
    gpu::memcpy_async(staging_.data(), src + off, n, context.stream);
    finish_device_work(context, done);
    shm::deliver(r, off, staging_.data(), n);
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

}  // namespace chorus::transport
