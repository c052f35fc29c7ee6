// chorus — device memory over the shm transport (the IPC path, docs/GPU.md).
//
// A rank whose operation runs on device buffers sends every non-empty message as a DEVICE
// RENDEZVOUS slot: the IPC handle of the device allocation holding the message, the message's
// offset in it, its address and the sender's device. The receiver maps the allocation (once per
// handle: mappings are cached per peer), copies (copy engine) or reduces (kernel: dst = local op
// incoming) on the communicator's own stream, and acknowledges through `rndv_done` once that work
// has completed, as for a CMA rendezvous. Receivers take any slot kind in any mode, so ranks with
// host buffers and ranks with device buffers mix in one collective:
//
//   sender \ receiver     device buffers                         host buffers
//   device buffers        IPC copy / reduce kernel (async)       map, copy to host, reduce on CPU
//   host buffers          inline/eager/CMA, then copy to device  the host protocol
//
// Whether ranks may exchange device memory at all is decided at set-up, without touching the
// GPU runtime: every rank publishes device_ipc_signature() in its segment, and IPC is allowed
// when all of them are equal and non-empty.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
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

// The payload of a device rendezvous slot.
struct DeviceRendezvous {
  gpu::IpcMemHandle handle;  // the sender's allocation (unused between ranks of one process)
  uint64_t offset = 0;       // of the message's first byte in the allocation
  uint64_t addr = 0;         // the message in the sender's address space
  int32_t device = -1;       // the sender's device
};
// Bytes of slot payload a device rendezvous uses (the handle; the rest rides in the header).
inline constexpr size_t kDeviceRendezvousPayload = sizeof(gpu::IpcMemHandle::bytes);
// Into the header fields a device rendezvous does not otherwise use (offset, addr, bytes) and the
// first kDeviceRendezvousPayload bytes of the slot's payload; kind, total and stamp are the
// caller's.
void encode(const DeviceRendezvous& d, SlotHeader* h, std::byte* payload);
DeviceRendezvous decode(const SlotHeader* h, const std::byte* payload);

// A peer's allocation as mapped on one of this process's devices.
struct MappingKey {
  std::array<unsigned char, 64> handle{};
  int device = -1;
  bool operator==(const MappingKey&) const = default;
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
