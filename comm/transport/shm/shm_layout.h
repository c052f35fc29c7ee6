// chorus — the layout of a rank's shared-memory segment.
//
// Rank r's segment holds everything that flows *into* r: one FIFO per sender, plus r's doorbell.
// A sender maps the receiver's segment, writes the payload and header of a slot, and publishes
// it last by storing the slot's sequence number (message index + 1) in the header's `seq`: the
// receiver polls that one word, in the line it reads next anyway, so a small message costs one
// cache-line transfer. The receiver advances `tail` once it has consumed a slot; the sender
// reads `tail` only when its own cached copy says the FIFO is full. Counters only grow (64-bit,
// no wrap). Each counter has its own cache line: they are written by different ranks.
//
//   [SegmentHeader][FifoCtrl x world_size][pad to 4 KiB][slots of sender 0][slots of sender 1]...
//   [FanCtrl x world_size][pad to 4 KiB][fan slots]
//   slots of one sender: depth x ([SlotHeader][slot_bytes of payload])
//   fan buffer: fan_capacity() bytes
//
// The fan buffer is the one thing in a segment that flows *out* of its rank: written by this
// rank alone and read by every peer (Request::kShared: a broadcast root writes each piece once,
// however many receive it). It is a byte ring of pieces, each a SlotHeader and its payload
// rounded up to 64 bytes (at most fan_slot_bytes; none for an INLINE piece of at most 16 bytes),
// so that many small messages fit at once and a large one goes in large pieces. Positions count
// bytes from the start and only grow. A piece at position p publishes itself by storing p + 1 in
// its `seq` last, and before that the writer zeroes the `seq` word at the position after it,
// so a reader polling there never takes stale bytes of an earlier lap for a header. A piece
// that would cross the end of the ring is preceded by a SKIP header that sends the readers to
// its start. Each reader r keeps its position in FanCtrl[r]; the writer writes over bytes only
// once every peer has read past them. So every peer reads every message of a rank's fan buffer,
// in order: a message goes to all peers or to none.
//
// A slot is INLINE (a whole message of at most 16 bytes, in the header line itself, where
// `offset` and `addr` would be: the receiver's one poll brings the payload with it), EAGER
// (payload after the header: `bytes` at `offset` of a `total`-byte message) or RENDEZVOUS
// (payload stays in the sender's memory at `addr`; the receiver reads it with process_vm_readv
// and then bumps `rndv_done`, which the sender waits for before its send completes — a single
// copy for large messages) or DEVICE RENDEZVOUS (a piece of the message in the sender's device
// memory: the slot carries the IPC handle of its allocation and the piece's place, shm_device.h;
// the receiver maps it, copies or reduces on its device and then bumps `rndv_done` like a
// rendezvous).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/futex.h"
#include "transport/transport.h"

namespace chorus::transport::shm {

inline constexpr uint64_t kSegmentMagic = 0x63686f7275730008ull;  // "chorus", layout v8

// What a rank tells its peers about itself through its own segment (see PeerStatus).
struct alignas(64) SegmentHeader {
  uint64_t magic;
  uint32_t world_size;
  uint32_t rank;
  int32_t pid;
  uint32_t slot_bytes;
  uint32_t depth;
  uint32_t fan_slot_bytes;
  uint32_t fan_depth;
  uint64_t probe;  // a known value peers read with process_vm_readv to test single-copy access
  // shm::device_ipc_signature(): ranks that all publish the same non-empty one exchange device
  // memory through IPC. Written before the segment is announced, never changed.
  char gpu_signature[128];
  alignas(64) Doorbell bell;
  alignas(64) std::atomic<uint32_t> status;  // PeerStatus; written once when it leaves or fails
  int32_t cause_rank;                        // failed: the rank whose failure caused ours (or us)
  std::atomic<uint64_t> ops_done;            // operations this rank completed on the communicator
  char error[1024];                          // failed: the error text, NUL-terminated
  // Set once this rank has closed every peer device allocation it mapped (the transport's end):
  // a peer frees memory it exported to this rank only after that (shm_device.h).
  alignas(64) std::atomic<uint32_t> ipc_closed;
  // Raised by any peer that fails, so an operation's start needs one load to notice.
  alignas(64) std::atomic<uint32_t> alarm;
  // The collective this rank is in (seqlock: `version` odd while `current` is being written), so
  // that two ranks each waiting to receive from the other can see they called different ones.
  alignas(64) std::atomic<uint64_t> version;
  OpStamp current;
};

struct FifoCtrl {
  alignas(64) std::atomic<uint64_t> tail;       // slots consumed by the receiver
  alignas(64) std::atomic<uint64_t> rndv_done;  // rendezvous reads finished by the receiver
  std::atomic<uint32_t> cma_ok;                 // receiver can read the sender's memory
  // A shared copy of a rendezvous (SlotHeader::offset = 1: the sender waits for it with nothing
  // else to do): the receiver offers the sender the bytes [assist_offset, + assist_bytes) of the
  // message, to write with process_vm_writev to assist_addr in the receiver's memory while the
  // receiver reads the rest. `assist` is (rendezvous number << 2) | Assist; the fields before
  // it are written first. The sender takes an offer (Offered -> Taken) and marks it Done, or
  // Offered again if its write failed; the receiver takes back one not taken (Offered ->
  // Revoked) once it has read its own part, and copies that part too.
  alignas(64) std::atomic<uint64_t> assist;
  uint64_t assist_offset, assist_bytes, assist_addr;
};
enum Assist : uint64_t {
  kAssistOffered = 1,
  kAssistTaken = 2,
  kAssistDone = 3,
  kAssistRevoked = 0
};

// In the writer's segment, one per reader: slots of the writer's fan buffer that reader consumed.
struct FanCtrl {
  alignas(64) std::atomic<uint64_t> tail;
};
static_assert(sizeof(FanCtrl) == 64);

enum class SlotKind : uint32_t {
  kEager = 1,
  kRendezvous = 2,
  kInline = 3,
  kDeviceRendezvous = 4,
  kSkip = 5,  // fan buffer: the rest of the ring is unused, the next piece is at its start
};

struct alignas(64) SlotHeader {
  std::atomic<uint64_t> seq;  // index of the slot's message in the FIFO + 1, stored last
  SlotKind kind;
  uint32_t bytes;   // eager: payload bytes in this slot
  uint64_t total;   // bytes of the whole message
  uint64_t offset;  // eager: where this slot's payload starts in the message; rendezvous: 1 when
                    // the sender would copy part of it (FifoCtrl::assist), else 0
  uint64_t addr;    // rendezvous: the message in the sender's address space
  OpStamp stamp;    // the sender's operation, compared with the receiver's
};
static_assert(sizeof(SlotHeader) == 64, "one cache line of header per slot");
// INLINE slots carry their payload in `offset` and `addr`, which they do not use.
inline constexpr size_t kInlineBytes = 16;
static_assert(offsetof(SlotHeader, addr) == offsetof(SlotHeader, offset) + 8);
inline std::byte* inline_payload(SlotHeader* h) { return reinterpret_cast<std::byte*>(&h->offset); }
inline const std::byte* inline_payload(const SlotHeader* h) {
  return reinterpret_cast<const std::byte*>(&h->offset);
}

struct Layout {
  size_t world_size, slot_bytes, depth;
  size_t fan_slot_bytes, fan_depth;

  static constexpr size_t kCtrlOffset = (sizeof(SegmentHeader) + 63) / 64 * 64;
  size_t slot_stride() const { return sizeof(SlotHeader) + slot_bytes; }
  size_t slots_offset() const {
    return (kCtrlOffset + world_size * sizeof(FifoCtrl) + 4095) / 4096 * 4096;
  }
  size_t fifo_offset(int sender) const { return slots_offset() + sender * depth * slot_stride(); }
  static size_t page_up(size_t n) { return (n + 4095) / 4096 * 4096; }
  size_t fan_ctrl_offset() const { return page_up(fifo_offset(static_cast<int>(world_size))); }
  size_t fan_slots_offset() const {
    return page_up(fan_ctrl_offset() + world_size * sizeof(FanCtrl));
  }
  size_t fan_slot_stride() const { return sizeof(SlotHeader) + fan_slot_bytes; }
  // fan_depth of the largest pieces, and the line the writer zeroes after the last one: with
  // fan_depth >= 2 a piece always fits after a skip once the readers have caught up.
  size_t fan_capacity() const { return fan_depth * fan_slot_stride() + sizeof(SlotHeader); }
  size_t total_bytes() const { return fan_slots_offset() + fan_capacity(); }
};

}  // namespace chorus::transport::shm
