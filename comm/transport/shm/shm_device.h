// chorus — device memory over the shm transport (the IPC path, docs/GPU.md).
//
// A rank whose operation runs on device buffers sends every message larger than one FIFO slot as
// DEVICE RENDEZVOUS pieces: each slot names device memory the receiver maps through IPC (the
// allocation's handle, the piece's offset in it, its address and the sender's device) and which
// bytes of the message it holds. The receiver maps the allocation (once per handle: mappings are
// cached per peer), copies (copy engine) or reduces (kernel: dst = local op incoming) on the
// communicator's own stream, and acknowledges the piece through `rndv_done` once that work has
// completed, as for a CMA rendezvous. Smaller messages go through the FIFO's slots.
//
// Whose memory a piece is in (Origin) is the lifetime rule of the IPC path. CUDA and HIP leave
// freeing an exported allocation before every importer has closed it undefined, and applications
// free and reallocate buffers all the time; so a peer maps only memory whose life chorus knows:
//
//   kOutbox      the sender's OUTBOX, device memory the link owns (two chunks, allocated at the
//                first such send): the sender copies each piece of the caller's buffer into a
//                free chunk, publishes it, and reuses the chunk once the receiver acknowledged
//                it. Any application buffer, freed and reallocated at will, and memory IPC
//                cannot export (managed memory, stream-ordered pools) are safe this way.
//   kRegistered  memory the application registered (Communicator::register_device_memory):
//                sent in one piece straight from the caller's buffer (zero copy). Peers keep it
//                mapped until a collective deregistration, or the communicator's end, closes
//                every such mapping; the application frees it only after that.
//   kSameProcess a peer in this process: the address itself, nothing is mapped.
//
// The outbox and registered mappings outlive operations; at the transport's end every rank
// closes its mappings, says so in its segment (SegmentHeader::ipc_closed), and a rank that
// exported memory frees its outboxes only once each peer it sent to has closed (or is gone).
//
// Receivers take any slot kind in any mode, so ranks with host buffers and ranks with device
// buffers mix in one collective:
//
//   sender \ receiver     device buffers                         host buffers
//   device buffers        IPC copy / reduce kernel (async)       map, copy to host, reduce on CPU
//   host buffers          inline/eager/CMA, then copy to device  the host protocol
//
// Whether ranks may exchange device memory at all is decided at set-up, without touching the
// GPU runtime: every rank publishes device_ipc_signature() in its segment, and IPC is allowed
// when all of them are equal and non-empty.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "chorus/gpu/runtime.h"
#include "transport/shm/shm_layout.h"

namespace chorus::transport::shm {

// What this process can share: the GPU runtime it was built with, that a driver is present, and
// which devices it sees (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES: ranks
// must number the devices alike). Empty when it cannot use IPC (built without GPU support, or no
// driver). Reads no GPU runtime state.
std::string device_ipc_signature();

// Whether ranks publishing `signatures` (indexed by rank) may exchange device memory: all equal
// and non-empty. Otherwise `why` names the first rank that differs and how.
bool signatures_allow_ipc(std::span<const std::string> signatures, std::string* why);

// Where the memory of a device rendezvous piece comes from (see above).
enum class Origin : uint32_t { kOutbox = 1, kRegistered = 2, kSameProcess = 3 };

// The payload of a device rendezvous slot: one piece of a message in the sender's device memory.
struct DeviceRendezvous {
  gpu::IpcMemHandle handle;   // the allocation holding the piece (unused for kSameProcess)
  uint64_t offset = 0;        // of the piece's first byte in that allocation
  uint64_t addr = 0;          // the piece in the sender's address space
  uint64_t piece_offset = 0;  // where the piece starts in the message
  uint64_t piece_bytes = 0;   // its length
  int32_t device = -1;        // the sender's device
  Origin origin = Origin::kOutbox;
};
static_assert(std::is_trivially_copyable_v<DeviceRendezvous>);
// Bytes of slot payload a device rendezvous uses: all of it rides in the payload (the header's
// kind, total and stamp are the caller's). CHORUS_SHM_SLOT_BYTES is at least kMinSlotBytes.
inline constexpr size_t kDeviceRendezvousPayload = sizeof(DeviceRendezvous);
inline constexpr size_t kMinSlotBytes = 128;
static_assert(kDeviceRendezvousPayload <= kMinSlotBytes);
void encode(const DeviceRendezvous& d, SlotHeader* h, std::byte* payload);
DeviceRendezvous decode(const SlotHeader* h, const std::byte* payload);

// The chunks of a link's outbox (see above) and which piece each last carried: a chunk is free
// again once the receiver has acknowledged that piece (its rendezvous number is at most the
// receiver's rndv_done). Pieces take the chunks in turn, so with two chunks the sender fills one
// while the receiver reads the other. Pure bookkeeping; the link moves the bytes.
class OutboxChunks {
 public:
  static constexpr int kChunks = 2;
  explicit OutboxChunks(size_t chunk_bytes = 0) : chunk_bytes_(chunk_bytes) {}
  size_t chunk_bytes() const { return chunk_bytes_; }
  // The chunk the next piece goes into, or -1 while it still holds an unacknowledged piece.
  int next_free(uint64_t acknowledged) const { return token_[next_] <= acknowledged ? next_ : -1; }
  // The next piece of a message of `total` bytes, of which `sent` are in pieces already.
  size_t piece_bytes(size_t sent, size_t total) const {
    return std::min(chunk_bytes_, total - sent);
  }
  // Chunk `chunk` (next_free()) now carries the piece with rendezvous number `token`.
  void carry(int chunk, uint64_t token) {
    token_[chunk] = token;
    next_ = (chunk + 1) % kChunks;
  }
  size_t offset_of(int chunk) const { return static_cast<size_t>(chunk) * chunk_bytes_; }

 private:
  size_t chunk_bytes_;
  std::array<uint64_t, kChunks> token_{};
  int next_ = 0;
};

// A peer's allocation as mapped on one of this process's devices.
struct MappingKey {
  std::array<unsigned char, 64> handle{};
  int device = -1;
  bool operator==(const MappingKey&) const = default;
};

// A peer's allocation mapped here, and whether the application registered it (such mappings are
// closed at a deregistration; outbox mappings live as long as the link).
struct PeerMapping {
  gpu::IpcMapping mapping;
  bool registered = false;
};

// A small map with least-recently-used eviction (a peer's mapped allocations): a handful of
// entries, searched linearly. A pointer from find() or insert() stays valid until the next
// insert().
template <class Key, class Value>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity > 0 ? capacity : 1) {}

  Value* find(const Key& key) {
    for (Entry& e : entries_)
      if (e.key == key) {
        e.used = ++clock_;
        return &e.value;
      }
    return nullptr;
  }
  // Adds `key` (not present), first evicting the least recently used entry when full.
  Value& insert(const Key& key, Value value) {
    if (entries_.size() >= capacity_) {
      size_t oldest = 0;
      for (size_t i = 1; i < entries_.size(); ++i)
        if (entries_[i].used < entries_[oldest].used) oldest = i;
      entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(oldest));
    }
    entries_.push_back(Entry{key, std::move(value), ++clock_});
    return entries_.back().value;
  }
  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }
  bool contains(const Key& key) const {
    for (const Entry& e : entries_)
      if (e.key == key) return true;
    return false;
  }
  // Drops every entry whose value satisfies `pred`; returns how many.
  template <class Pred>
  size_t erase_if(Pred pred) {
    return std::erase_if(entries_, [&](const Entry& e) { return pred(e.value); });
  }
  void clear() { entries_.clear(); }

 private:
  struct Entry {
    Key key;
    Value value;
    uint64_t used;
  };
  size_t capacity_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
};

}  // namespace chorus::transport::shm
