// chorus — the transport seam: what moves bytes between two ranks.
//
// A Transport is one Link per peer, the capabilities fixed when it was set up, a Waiter (how its
// rank sleeps until a peer acts) and a PeerMonitor (peer_monitor.h). A Link advances posted
// Requests without ever blocking: progress_*() does whatever is possible now and returns whether
// anything moved. Requests in one direction of one link complete in posting order, so the engine
// (comm/exchange.h) only ever hands a link the oldest unfinished request of each direction.
// Algorithms never see a Transport: they post requests to an Exchange.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "chorus/error.h"
#include "chorus/gpu/runtime.h"
#include "chorus/types.h"
#include "transport/futex.h"
#include "transport/op_stamp.h"
#include "transport/peer_monitor.h"

namespace chorus::transport {

// The device side of operations on device memory: the device the buffers are on, and the stream
// on which links queue their copies and reductions (the communicator's own stream, never a stream
// of the application).
struct DeviceContext {
  int device = -1;
  gpu::Stream stream;
  std::chrono::steady_clock::time_point deadline;  // of the operation: device waits end there
};

// Waits until the work queued on `context.stream` so far has run: records `done` there and polls
// it with back-off (ranks share cores). Throws chorus::Timeout at context.deadline (a device
// copy can be stuck behind a stream that waits for this very operation, docs/GPU.md).
void finish_device_work(const DeviceContext& context, gpu::Event& done);

struct Request {
  enum class Kind : uint8_t {
    kSend,        // send `bytes` from src
    kRecv,        // receive `bytes` into dst
    kRecvReduce,  // dst = local op incoming, element-wise (dst may equal local)
  };
  // What the operation knows of the message that a transport may use to move it (or-ed into
  // `facts`). A link without a use for one ignores it; kShared reaches only transports that fan
  // out (the Exchange posts it only there).
  enum Fact : uint8_t {
    // Through the sender's shared buffer (Capabilities::fans_out): a send marked so is one of a
    // set, one to every peer, of the same bytes, which the sender writes once into a buffer that
    // every peer copies out of; a receive marked so reads the peer's shared buffer. Both sides
    // mark alike (Exchange::post_fan_out / post_fan_in). `dst` on such a send, when set,
    // receives a copy too (the root's own result of an out-of-place broadcast).
    kShared = 1 << 0,
    // A send whose sender has nothing else to do until it is done: a receiver that reads it
    // single copy may hand part of the copy back to the sender, so that both copy at once.
    kSenderIdle = 1 << 1,
    // A receive (or a shared send's copy to dst) whose result the operation does not read again:
    // large ones are written with streaming stores, which cost no read for ownership.
    kNotReadAgain = 1 << 2,
  };
  Kind kind = Kind::kSend;
  uint8_t facts = 0;
  bool done = false;  // set by the link; the Exchange then retires the request
  int peer = -1;
  const std::byte* src = nullptr;
  std::byte* dst = nullptr;
  const std::byte* local = nullptr;
  size_t bytes = 0;
  DataType dtype = DataType::kU8;
  ReduceOp op = ReduceOp::kSum;  // never kAvg here: the algorithm divides at the end
  OpStamp stamp;                 // the operation this message belongs to
  // Forwarding (Exchange::post_forward): a receive whose result (dst, once written) another
  // request sends on to a further peer. `forward` on the receive points to that send, `after` on
  // the send to the receive. The Exchange starts such a send once the receive is done, unless
  // the receive's link wrote the pieces into it already as they arrived (Link::progress_recv).
  Request* forward = nullptr;
  Request* after = nullptr;

  // The link's own record of its progress on the request: storage that belongs to the link that
  // progresses it, which keeps a type of its own there (state<T>(): trivially copyable, at most
  // kLinkStateBytes); zero when posted. The Exchange never reads it.
  static constexpr size_t kLinkStateBytes = 32;
  template <class T>
  T& state() {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= kLinkStateBytes &&
                  alignof(T) <= alignof(uint64_t));
    return *std::launder(reinterpret_cast<T*>(link_state_));
  }
  template <class T>
  const T& state() const {
    return const_cast<Request*>(this)->state<T>();
  }

 private:
  alignas(uint64_t) std::byte link_state_[kLinkStateBytes]{};
};

class Link {
 public:
  virtual ~Link() = default;
  // Advance the oldest unfinished send / receive of this link. Return true if anything moved.
  // Throw chorus::Error on a broken link or a size mismatch (naming the peer).
  // `forward_into` (receives): the send that passes this receive's result on (Request::forward)
  // while it is next in line to its peer, else null. A link that can writes each incoming piece
  // into it as it arrives (one pass over the bytes instead of two), advancing that send too.
  virtual bool progress_send(Request& r) = 0;
  virtual bool progress_recv(Request& r, Request* forward_into) = 0;
  // The stamp of the next message from the peer, once it has arrived far enough to be told
  // (its header), without taking anything: the receive posted next takes it as usual. False
  // when nothing has arrived yet. Called only while no receive from the peer is in progress
  // (the Exchange matches point-to-point receives by it: Exchange::post_p2p_recv).
  virtual bool peek(OpStamp& stamp) = 0;

  // The small-message path (Exchange::exchange_small), for links that have one. The caller has
  // nothing queued to or from this peer. send_now() sends a whole message of `bytes` host bytes
  // at once without waking the peer, and returns false, having done nothing, when it cannot
  // (too large, no room, device memory); notify() then wakes the peer if it sleeps. recv_now()
  // takes a whole message of `bytes` into dst if one has arrived in a form it handles, and
  // returns false, having consumed nothing, otherwise: a posted receive then takes it as usual.
  // Both throw like progress_*() on a mismatch.
  virtual bool send_now(const void* src, size_t bytes, const OpStamp& stamp) {
    (void)src, (void)bytes, (void)stamp;
    return false;
  }
  virtual void notify() {}
  virtual bool recv_now(void* dst, size_t bytes, const OpStamp& stamp) {
    (void)dst, (void)bytes, (void)stamp;
    return false;
  }
  // Writes `bytes` at src straight into the peer's memory at `remote` (an address the peer
  // made known), one copy; only where capabilities().puts_to_all holds. Throws chorus::Error
  // naming the peer when the write fails (PeerFailure when the peer's process is gone).
  virtual void put(const void* src, uint64_t remote, size_t bytes) {
    (void)src, (void)remote, (void)bytes;
    throw Error(ErrorKind::kInternal, "put over a link that has none");
  }
  // The same for the peer's shared buffer (Transport::fan_send_now; Request::kShared): takes the
  // peer's next shared message into dst if it has arrived whole in one piece, else returns false
  // and leaves it to a posted shared receive.
  virtual bool fan_recv_now(void* dst, size_t bytes, const OpStamp& stamp) {
    (void)dst, (void)bytes, (void)stamp;
    return false;
  }
};

// Waiting for peers without spinning. The Exchange, having found nothing to do, calls arm(),
// progresses and checks its condition once more, then either disarm()s (it can go on) or
// sleep()s with the token. Any action after arm() of a peer in `awaited` that this rank may be
// waiting for ends the sleep; so does max_ns. sleep() disarms. The Exchange holds its transport's
// waiter for its whole life (Transport::waiter()).
class Waiter {
 public:
  virtual uint32_t arm() = 0;
  virtual void disarm() = 0;
  // `awaited`: the peers this rank waits for, whose links the Exchange progressed last.
  virtual void sleep(uint32_t token, long max_ns, std::span<const int> awaited) = 0;
  // Ends a sleep of this rank's waiter from another thread (abort).
  virtual void wake() = 0;

 protected:
  ~Waiter() = default;
};

// What a transport can do, fixed when it is set up (the same for its whole life).
struct Capabilities {
  static constexpr size_t kDefaultChunkBytes = 256 << 10;
  // The pipelining unit algorithms should use over this transport (CHORUS_CHUNK_BYTES overrides).
  size_t chunk_bytes = kDefaultChunkBytes;
  // The smallest message some peer reads single copy (so that set_single_copy(false) changes how
  // it travels); SIZE_MAX when no peer is read single copy.
  size_t single_copy_from = SIZE_MAX;
  // Whether this rank can send one message to all its peers through a shared buffer that it
  // writes once and every peer reads (Request::kShared): one host, every rank on this transport,
  // host memory. The same on every rank of a communicator.
  bool fans_out = false;
  // Whether every rank can write every other rank's memory (Link::put): one host, every rank on
  // this transport, single copy allowed between every pair. The same on every rank.
  bool puts_to_all = false;
  // Whether every link can move device memory (buffers of one host's devices, through IPC); when
  // not, why not (the communicator then stages device buffers through pinned host memory; never
  // empty once fixed).
  bool moves_device_memory = false;
  std::string host_memory_only;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual Link& link(int peer) = 0;
  const Capabilities& capabilities() const { return capabilities_; }
  // How this rank sleeps until its peers act (the same object for the transport's life).
  virtual Waiter& waiter() = 0;
  // Liveness of the peers and the failure notices (the same object for the transport's life).
  virtual PeerMonitor& monitor() = 0;
  virtual std::string name() const = 0;

  // The small-message path of the shared buffer (Exchange::fan_small): writes a whole message of
  // `bytes` host bytes into it at once, as one piece, and copies it to `copy_to` too when that is
  // set; returns false, having done nothing, when it cannot (no shared buffer, too large, no
  // room, a message still being written). Wakes no peer: the caller notify()s their links.
  virtual bool fan_send_now(const void* src, size_t bytes, void* copy_to, const OpStamp& stamp) {
    (void)src, (void)bytes, (void)copy_to, (void)stamp;
    return false;
  }

  // The memory of the operation about to run: `device` (kept by the caller until it is set back)
  // for device buffers, null for host memory (the default). Requests posted meanwhile are device
  // memory. Transports that cannot move device memory (capabilities().moves_device_memory) refuse
  // a non-null context (chorus::Error).
  virtual void set_device_memory(const DeviceContext* device);
  // Whether the sends of the operation about to run may go single copy (the default); false:
  // they copy through the transport's buffers whatever their size (algo::Path::kFifo). The
  // receiver accepts either way. Transports that never copy single copy ignore it.
  virtual void set_single_copy(bool allowed) { (void)allowed; }

  // Device memory the application registered (Communicator::register_device_memory): a transport
  // that maps peers' device memory may send from inside it without copying, and peers may keep it
  // mapped until close_registered_mappings(). Called between operations only. Transports that
  // map nothing ignore both; register refuses (InvalidArgument) memory it could never share.
  virtual void register_device_memory(const void* base, size_t bytes) { (void)base, (void)bytes; }
  // Forgets the registration starting at `base` (false: none), and closes every mapping of
  // registered peer memory this rank holds. Part of a collective deregistration: once every rank
  // has done it, no rank maps another's registered memory.
  virtual bool deregister_device_memory(const void* base) {
    (void)base;
    return true;
  }

  // The operation in progress failed and the communicator is broken: stops every transfer still
  // posted, so that nothing writes into (or reads from) the caller's buffers once the failed call
  // has returned. Transports whose transfers are all driven by this rank's own calls have nothing
  // to stop.
  virtual void abandon() {}

 protected:
  // Each transport states what it can do once, at the end of its set-up. Until then it can do
  // only the defaults of Capabilities: host memory, FIFO copies. One that moves host memory only
  // without saying why gets "the <name> transport moves host memory only".
  void fix_capabilities(Capabilities capabilities);

 private:
  Capabilities capabilities_;
};

}  // namespace chorus::transport
