// chorus — the Communicator: a group of ranks and the collectives they run together.
//
// Buffers are pointer + count (elements, never bytes) + DataType, or, in the typed forms, any
// contiguous range of a chorus element type (std::vector<T>, std::span<T>, std::span<const T>,
// ...; typed_buffer.h), whose sizes give the counts:
//   std::vector<float> grad(n), shard(n / comm.size());
//   comm.all_reduce(grad, chorus::ReduceOp::kAvg);                      // in place
//   comm.reduce_scatter(grad, shard, chorus::ReduceOp::kSum);
//   comm.all_gather(std::span{shard}, std::span{grad});
//   chorus::Work w = comm.all_gather_async(shard, grad);  // ... then w.wait()
// In-place follows NCCL's rules:
//   all_reduce      in place when send == recv
//   reduce_scatter  in place when send + rank * recv_count elements == recv
//   all_gather      in place when send == recv + rank * send_count elements
//   broadcast/reduce in place when send == recv
//   gather          in place (root) when send == recv + root * send_count; scatter (root) when
//                   recv == send + root * recv_count
//   all_to_all, send_recv  never in place: send and recv must not overlap
// Other overlaps between send and recv are rejected. Every call has an *_async form returning a
// Work; the blocking form is the async one plus wait(). Operations on one communicator complete
// in the order they were issued, and every rank must issue the same collectives in the same
// order (point-to-point messages match by source, tag and order: see below).
//
// Point-to-point matching. send, recv and send_recv take a tag (default 0), as MPI and gloo do.
// A receive takes the oldest message from its peer that carries its tag; with kAnySource as the
// peer, the oldest such message of any other rank that has arrived (Work::source() and the
// blocking recv() say whose). Messages of one tag from one rank are received in the order they
// were sent; a message with another tag ahead of a receive is set aside (copied into the
// communicator's memory) for a later receive of its tag, so tags may be received in any order.
// A message and the receive it matches must have the same size (chorus::Mismatch otherwise).
// Receives between ranks that use one tag, tag 0 included, take each message straight into
// their buffer as before: tags cost a copy only when a message must step aside. Operations
// still run one at a time in issue order, so a receive that waits for a message its peer sends
// only after a later call of this rank waits until the timeout; a send completes once its
// message is out (large ones once the receiver has read or set it aside). Any-source receives
// take messages of other ranks only (not those sent to self), and are host memory only;
// messages sent to self match by tag like the others. Tags are 0 or more; the stream-ordered
// forms use tag 0.
//
// Point-to-point with oneself: send, recv and send_recv accept this rank as the peer, as NCCL
// does (a one-rank group from split() runs a send_recv pattern unchanged). A send to self waits
// for the earlier operations, copies the message and completes at once; a receive from self
// takes the oldest message sent to self, so the send must be issued first (or in the same
// send_recv): otherwise, or when the sizes differ, the receive throws InvalidArgument. Self
// messages stay on the calling thread and are not recorded by the flight recorder.
//
// Threading: one thread at a time may issue calls on a Communicator (like NCCL); Work handles may
// be waited on from any thread. Each Communicator has one progress thread that runs queued
// operations; a blocking call issued while nothing is queued runs directly in the caller.
//
// Device memory. Every call takes host or device buffers (CUDA or HIP, whichever chorus was built
// with; managed memory counts as device memory, pinned host memory as host memory). The buffers
// of one call must all be host memory or all device memory of one device (InvalidArgument
// naming them otherwise), and a communicator works with one device, fixed by its first device
// operation. When every rank is on one host, device buffers are read by the peers through
// CUDA/HIP IPC and reduced by kernels on the device (the IPC path); otherwise they travel
// through pinned host staging memory and the host transports (CHORUS_GPU_PATH; docs/GPU.md).
// Ranks may pass device buffers and host buffers to the same collective, except where
// chorus-tune --device fitted the IPC path's constants: calls on device buffers that move by IPC
// are chosen by them, calls on host buffers by the host's, and ranks that chose different
// algorithms fail with a Mismatch that says so (a forced algorithm makes them agree).
//
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/error.h"
#include "chorus/gpu/runtime.h"
#include "chorus/half.h"
#include "chorus/store.h"
#include "chorus/typed_buffer.h"
#include "chorus/types.h"

namespace chorus {

enum class Collective : uint8_t {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kGather,
  kScatter,
  kAllToAll,
  kBarrier,
  kSend,
  kRecv,
  kSendRecv,
};
std::string_view to_string(Collective c);

// Where a call's buffers are, for the questions a Communicator answers about its algorithms
// (priced_link, algorithm_for, explain): device buffers that move by IPC are priced on that
// path's own constants where chorus-tune --device fitted them (docs/GPU.md).
enum class BufferMemory : uint8_t { kHost, kDevice };

// A handle on an operation in flight. Default-constructed = already complete.
class Work {
 public:
  Work() = default;
  // Blocks until the operation completes; rethrows its error (a chorus::Error) if it failed.
  void wait();
  // Like wait(), but returns false if it did not complete within `timeout`.
  bool wait_for(std::chrono::milliseconds timeout);
  // True once complete (successfully or not). Never throws.
  bool test() const;
  // The failure, or nullptr (also while still running).
  std::exception_ptr error() const;
  // The algorithm that ran (or was chosen), e.g. "ring"; empty for a default Work.
  std::string algorithm() const;
  // The rank whose message a completed receive (recv_async, send_recv_async) took: the peer it
  // named, or for kAnySource the sender it matched. -1 for other operations, while it runs, and
  // after a failure.
  int source() const;

  struct State;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

struct CommOptions {
  // Deadline of every blocking wait: connecting to the bootstrap store and each request to it,
  // the set-up, each operation (chorus/timeout.h). 0 = CHORUS_TIMEOUT (default 300 s);
  // chorus::kNoDeadline, or anything longer, = no deadline.
  std::chrono::milliseconds timeout{0};
  // Algorithm for every collective that has it ("ring", "tree", "direct"); empty = CHORUS_ALGO,
  // else chosen by size.
  std::string algorithm;
  // Deterministic reductions (see "Deterministic mode" at Communicator); false =
  // CHORUS_DETERMINISTIC (default 0). Every rank must choose alike.
  bool deterministic = false;
};

// One algorithm a communicator could run for a collective of a given size, with the time the
// tuner's cost model predicts for it on this communicator (docs/perf/collectives.md, "Tuner").
struct AlgorithmEstimate {
  std::string algorithm;     // "ring", "tree", "direct", ..., "ring/fifo", ...
  double predicted_us = -1;  // model time per call in microseconds; < 0: no estimate
  bool chosen = false;       // what the selector uses (after set_algorithm / CHORUS_ALGO)
};

class SelfMessages;  // comm/self_messages.h

// Returned by split() to ranks that pass kNoColor.
inline constexpr int kNoColor = -1;
// The peer of a receive that takes a message from any other rank (see "Point-to-point matching").
inline constexpr int kAnySource = -1;

// Deterministic mode (CommOptions::deterministic, CHORUS_DETERMINISTIC=1). all_reduce,
// reduce_scatter and reduce then add the ranks' contributions in rank order: element e of the
// result is, bit for bit, the serial fold acc = x_0[e]; acc = acc op x_r[e] for r = 1..N-1, with
// one rounding per step for f16 and bf16 (each step computed in f32 and rounded, as
// chorus::kernels::reduce does); avg is that sum divided by N once, by the same division as in
// the default mode. The bits depend on nothing but the inputs: not on the algorithm, the chunk
// size (CHORUS_CHUNK_BYTES), the ring (CHORUS_RING), the path (single copy or FIFO), the number
// of hosts, or whether the buffers are in host or device memory; every rank that receives a
// result gets the same bits (as always). The NaN a NaN result carries is the kernels' choice, as
// in the default mode.
//   Only algorithms that fold in rank order run the reductions: direct (small messages) and
// twoshot (large ones, reduce_scatter included; across hosts too, in place of hier). Forcing
// another one for a reduction (CHORUS_ALGO, CommOptions::algorithm, set_algorithm) is not an
// error, since the forced name applies to every collective: the reduction runs with the
// algorithm the deterministic selector chooses for its size instead, which CHORUS_DEBUG=INFO logs
// once per communicator, collective and forced algorithm (rank 0), and which algorithm_for(),
// explain() and Work::algorithm() report. A forced direct or twoshot runs as forced. The other
// collectives are not affected. Cost: the two-shot step folds rank 0's copy first everywhere, so
// ranks >= 2 make one more pass over their segment than in the default mode (measured in
// docs/perf/collectives.md, "Deterministic reductions"). Communicators made by split() inherit
// the mode.
class Communicator {
 public:
  // Reads rank, world size and master from the launcher's environment (see launch_env.h), hosts
  // the bootstrap store on rank 0, and connects every rank. May be called again once a
  // communicator is destroyed, and for several communicators side by side, under every launcher:
  // rank 0 serves the store from its first call until the process exits, and every rank must
  // make its communicators in the same order (the k-th one of each rank belong together).
  static Communicator from_env(const CommOptions& options = {});
  // An explicit group: `store` must be shared by all `world_size` ranks (e.g. a TcpStore). Any
  // number of communicators may be made on one store, in the same order on every rank.
  Communicator(int rank, int world_size, std::shared_ptr<Store> store,
               const CommOptions& options = {});
  ~Communicator();
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  // Whether reductions fold in rank order (see "Deterministic mode" above).
  bool deterministic() const;

  // ---- collectives (counts in elements) ----------------------------------------------------
  [[nodiscard]] Work all_reduce_async(const void* send, void* recv, size_t count, DataType dtype,
                                      ReduceOp op);
  [[nodiscard]] Work reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                          DataType dtype, ReduceOp op);
  [[nodiscard]] Work all_gather_async(const void* send, void* recv, size_t send_count,
                                      DataType dtype);
  // Root's send is broadcast into every rank's recv (send is only read on the root).
  [[nodiscard]] Work broadcast_async(const void* send, void* recv, size_t count, DataType dtype,
                                     int root);
  // recv is only written on the root (may be null elsewhere).
  [[nodiscard]] Work reduce_async(const void* send, void* recv, size_t count, DataType dtype,
                                  ReduceOp op, int root);
  // The root's recv gets size() * send_count elements, rank i's at offset i * send_count.
  [[nodiscard]] Work gather_async(const void* send, void* recv, size_t send_count, DataType dtype,
                                  int root);
  // Rank i's recv gets the root's send[i * recv_count ...].
  [[nodiscard]] Work scatter_async(const void* send, void* recv, size_t recv_count, DataType dtype,
                                   int root);
  // send holds size() blocks of `count`; block j goes to rank j, whose recv block i it fills.
  [[nodiscard]] Work all_to_all_async(const void* send, void* recv, size_t count, DataType dtype);
  [[nodiscard]] Work barrier_async();
  // Point-to-point (see "Point-to-point matching"): `peer` of a receive may be kAnySource.
  [[nodiscard]] Work send_async(const void* send, size_t count, DataType dtype, int peer,
                                int tag = 0);
  [[nodiscard]] Work recv_async(void* recv, size_t count, DataType dtype, int peer, int tag = 0);
  // Sends to send_peer and receives from recv_peer at once (no ordering deadlock).
  [[nodiscard]] Work send_recv_async(const void* send, size_t send_count, int send_peer, void* recv,
                                     size_t recv_count, int recv_peer, DataType dtype,
                                     int send_tag = 0, int recv_tag = 0);

  // ---- stream-ordered forms (see "Streams" above) ------------------------------------------
  [[nodiscard]] Work all_reduce_async(const void* send, void* recv, size_t count, DataType dtype,
                                      ReduceOp op, gpu::Stream stream);
  [[nodiscard]] Work reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                          DataType dtype, ReduceOp op, gpu::Stream stream);
  [[nodiscard]] Work all_gather_async(const void* send, void* recv, size_t send_count,
                                      DataType dtype, gpu::Stream stream);
  [[nodiscard]] Work broadcast_async(const void* send, void* recv, size_t count, DataType dtype,
                                     int root, gpu::Stream stream);
  [[nodiscard]] Work reduce_async(const void* send, void* recv, size_t count, DataType dtype,
                                  ReduceOp op, int root, gpu::Stream stream);
  [[nodiscard]] Work gather_async(const void* send, void* recv, size_t send_count, DataType dtype,
                                  int root, gpu::Stream stream);
  [[nodiscard]] Work scatter_async(const void* send, void* recv, size_t recv_count, DataType dtype,
                                   int root, gpu::Stream stream);
  [[nodiscard]] Work all_to_all_async(const void* send, void* recv, size_t count, DataType dtype,
                                      gpu::Stream stream);
  // Later work on `stream` waits until every rank has reached the barrier.
  [[nodiscard]] Work barrier_async(gpu::Stream stream);
  [[nodiscard]] Work send_async(const void* send, size_t count, DataType dtype, int peer,
                                gpu::Stream stream);
  [[nodiscard]] Work recv_async(void* recv, size_t count, DataType dtype, int peer,
                                gpu::Stream stream);
  [[nodiscard]] Work send_recv_async(const void* send, size_t send_count, int send_peer, void* recv,
                                     size_t recv_count, int recv_peer, DataType dtype,
                                     gpu::Stream stream);

  // Blocking forms: the async call plus wait(), except that when nothing is queued the operation
  // runs directly on the calling thread (host buffers only: device buffers always go through the
  // progress thread).
  void all_reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DataType dtype, ReduceOp op);
  void all_gather(const void* send, void* recv, size_t send_count, DataType dtype);
  void broadcast(const void* send, void* recv, size_t count, DataType dtype, int root);
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root);
  void gather(const void* send, void* recv, size_t send_count, DataType dtype, int root);
  void scatter(const void* send, void* recv, size_t recv_count, DataType dtype, int root);
  void all_to_all(const void* send, void* recv, size_t count, DataType dtype);
  void barrier();
  void send(const void* buf, size_t count, DataType dtype, int peer, int tag = 0);
  // Returns the rank whose message it took (`peer`, or the sender for kAnySource).
  int recv(void* buf, size_t count, DataType dtype, int peer, int tag = 0);
  void send_recv(const void* send, size_t send_count, int send_peer, void* recv, size_t recv_count,
                 int recv_peer, DataType dtype, int send_tag = 0, int recv_tag = 0);

  // ---- typed forms ---------------------------------------------------------------------------
  // The calls above on typed buffers (typed_buffer.h): vectors, arrays and spans of T or const T
  // for every element type chorus has (Half and BFloat16 included), the DataType taken from T.
  // Counts come from the sizes, which are checked (InvalidArgument naming the call and the
  // buffer): where a call gathers or scatters, the whole buffer holds size() per-rank blocks.
  // Buffers a rank does not use may be empty there: broadcast's `in`, reduce's and gather's `out`
  // off the root, scatter's `in` off the root. The async forms given a `stream` are the
  // stream-ordered forms; without one, the plain async forms.
  template <OutputBuffer B>
  void all_reduce(B&& data, ReduceOp op) {
    const Typed t = typed("all_reduce", data, data, size_of(data), 1, true, 1, true);
    all_reduce(t.send, t.recv, t.count, t.dtype, op);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  void all_reduce(In&& in, Out&& out, ReduceOp op) {
    const Typed t = typed("all_reduce", in, out, size_of(in), 1, true, 1, true);
    all_reduce(t.send, t.recv, t.count, t.dtype, op);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  void reduce_scatter(In&& in, Out&& out, ReduceOp op) {
    const Typed t = typed("reduce_scatter", in, out, size_of(out), ranks(), true, 1, true);
    reduce_scatter(t.send, t.recv, t.count, t.dtype, op);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  void all_gather(In&& in, Out&& out) {
    const Typed t = typed("all_gather", in, out, size_of(in), 1, true, ranks(), true);
    all_gather(t.send, t.recv, t.count, t.dtype);
  }
  template <OutputBuffer B>
  void broadcast(B&& data, int root) {
    const Typed t = typed("broadcast", data, data, size_of(data), 1, true, 1, true);
    broadcast(t.send, t.recv, t.count, t.dtype, root);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  void broadcast(In&& in, Out&& out, int root) {
    const Typed t = typed("broadcast", in, out, size_of(out), 1, rank() == root, 1, true);
    broadcast(t.send, t.recv, t.count, t.dtype, root);
  }
  template <OutputBuffer B>
  void reduce(B&& data, ReduceOp op, int root) {
    const Typed t = typed("reduce", data, data, size_of(data), 1, true, 1, true);
    reduce(t.send, t.recv, t.count, t.dtype, op, root);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  void reduce(In&& in, Out&& out, ReduceOp op, int root) {
    const Typed t = typed("reduce", in, out, size_of(in), 1, true, 1, rank() == root);
    reduce(t.send, t.recv, t.count, t.dtype, op, root);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  void gather(In&& in, Out&& out, int root) {
    const Typed t = typed("gather", in, out, size_of(in), 1, true, ranks(), rank() == root);
    gather(t.send, t.recv, t.count, t.dtype, root);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  void scatter(In&& in, Out&& out, int root) {
    const Typed t = typed("scatter", in, out, size_of(out), ranks(), rank() == root, 1, true);
    scatter(t.send, t.recv, t.count, t.dtype, root);
  }
  // in and out hold size() blocks each (their sizes are equal and divisible by size()).
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  void all_to_all(In&& in, Out&& out) {
    const Typed t = typed("all_to_all", in, out, block_of(in), ranks(), true, ranks(), true);
    all_to_all(t.send, t.recv, t.count, t.dtype);
  }
  template <InputBuffer B>
  void send(B&& data, int peer) {
    const Typed t = typed("send", data, nullptr, size_of(data), 1, true, 1, false);
    send(t.send, t.count, t.dtype, peer);
  }
  template <OutputBuffer B>
  void recv(B&& data, int peer) {
    const Typed t = typed("recv", nullptr, data, size_of(data), 1, false, 1, true);
    recv(t.recv, t.count, t.dtype, peer);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  void send_recv(In&& in, int send_peer, Out&& out, int recv_peer) {
    send_recv(std::ranges::data(in), size_of(in), send_peer, std::ranges::data(out), size_of(out),
              recv_peer, dtype_of<In>());
  }

  template <OutputBuffer B>
  [[nodiscard]] Work all_reduce_async(B&& data, ReduceOp op,
                                      std::optional<gpu::Stream> stream = std::nullopt) {
    const Typed t = typed("all_reduce", data, data, size_of(data), 1, true, 1, true);
    return stream ? all_reduce_async(t.send, t.recv, t.count, t.dtype, op, *stream)
                  : all_reduce_async(t.send, t.recv, t.count, t.dtype, op);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  [[nodiscard]] Work all_reduce_async(In&& in, Out&& out, ReduceOp op,
                                      std::optional<gpu::Stream> stream = std::nullopt) {
    const Typed t = typed("all_reduce", in, out, size_of(in), 1, true, 1, true);
    return stream ? all_reduce_async(t.send, t.recv, t.count, t.dtype, op, *stream)
                  : all_reduce_async(t.send, t.recv, t.count, t.dtype, op);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  [[nodiscard]] Work reduce_scatter_async(In&& in, Out&& out, ReduceOp op,
                                          std::optional<gpu::Stream> stream = std::nullopt) {
    const Typed t = typed("reduce_scatter", in, out, size_of(out), ranks(), true, 1, true);
    return stream ? reduce_scatter_async(t.send, t.recv, t.count, t.dtype, op, *stream)
                  : reduce_scatter_async(t.send, t.recv, t.count, t.dtype, op);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  [[nodiscard]] Work all_gather_async(In&& in, Out&& out,
                                      std::optional<gpu::Stream> stream = std::nullopt) {
    const Typed t = typed("all_gather", in, out, size_of(in), 1, true, ranks(), true);
    return stream ? all_gather_async(t.send, t.recv, t.count, t.dtype, *stream)
                  : all_gather_async(t.send, t.recv, t.count, t.dtype);
  }
  template <OutputBuffer B>
  [[nodiscard]] Work broadcast_async(B&& data, int root,
                                     std::optional<gpu::Stream> stream = std::nullopt) {
    const Typed t = typed("broadcast", data, data, size_of(data), 1, true, 1, true);
    return stream ? broadcast_async(t.send, t.recv, t.count, t.dtype, root, *stream)
                  : broadcast_async(t.send, t.recv, t.count, t.dtype, root);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  [[nodiscard]] Work broadcast_async(In&& in, Out&& out, int root,
                                     std::optional<gpu::Stream> stream = std::nullopt) {
    const Typed t = typed("broadcast", in, out, size_of(out), 1, rank() == root, 1, true);
    return stream ? broadcast_async(t.send, t.recv, t.count, t.dtype, root, *stream)
                  : broadcast_async(t.send, t.recv, t.count, t.dtype, root);
  }
  template <OutputBuffer B>
  [[nodiscard]] Work reduce_async(B&& data, ReduceOp op, int root,
                                  std::optional<gpu::Stream> stream = std::nullopt) {
    const Typed t = typed("reduce", data, data, size_of(data), 1, true, 1, true);
    return stream ? reduce_async(t.send, t.recv, t.count, t.dtype, op, root, *stream)
                  : reduce_async(t.send, t.recv, t.count, t.dtype, op, root);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  [[nodiscard]] Work reduce_async(In&& in, Out&& out, ReduceOp op, int root,
                                  std::optional<gpu::Stream> stream = std::nullopt) {
    const Typed t = typed("reduce", in, out, size_of(in), 1, true, 1, rank() == root);
    return stream ? reduce_async(t.send, t.recv, t.count, t.dtype, op, root, *stream)
                  : reduce_async(t.send, t.recv, t.count, t.dtype, op, root);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  [[nodiscard]] Work gather_async(In&& in, Out&& out, int root,
                                  std::optional<gpu::Stream> stream = std::nullopt) {
    const Typed t = typed("gather", in, out, size_of(in), 1, true, ranks(), rank() == root);
    return stream ? gather_async(t.send, t.recv, t.count, t.dtype, root, *stream)
                  : gather_async(t.send, t.recv, t.count, t.dtype, root);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  [[nodiscard]] Work scatter_async(In&& in, Out&& out, int root,
                                   std::optional<gpu::Stream> stream = std::nullopt) {
    const Typed t = typed("scatter", in, out, size_of(out), ranks(), rank() == root, 1, true);
    return stream ? scatter_async(t.send, t.recv, t.count, t.dtype, root, *stream)
                  : scatter_async(t.send, t.recv, t.count, t.dtype, root);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  [[nodiscard]] Work all_to_all_async(In&& in, Out&& out,
                                      std::optional<gpu::Stream> stream = std::nullopt) {
    const Typed t = typed("all_to_all", in, out, block_of(in), ranks(), true, ranks(), true);
    return stream ? all_to_all_async(t.send, t.recv, t.count, t.dtype, *stream)
                  : all_to_all_async(t.send, t.recv, t.count, t.dtype);
  }
  template <InputBuffer B>
  [[nodiscard]] Work send_async(B&& data, int peer,
                                std::optional<gpu::Stream> stream = std::nullopt) {
    const Typed t = typed("send", data, nullptr, size_of(data), 1, true, 1, false);
    return stream ? send_async(t.send, t.count, t.dtype, peer, *stream)
                  : send_async(t.send, t.count, t.dtype, peer);
  }
  template <OutputBuffer B>
  [[nodiscard]] Work recv_async(B&& data, int peer,
                                std::optional<gpu::Stream> stream = std::nullopt) {
    const Typed t = typed("recv", nullptr, data, size_of(data), 1, false, 1, true);
    return stream ? recv_async(t.recv, t.count, t.dtype, peer, *stream)
                  : recv_async(t.recv, t.count, t.dtype, peer);
  }
  template <InputBuffer In, OutputBuffer Out>
  requires SameElement<In, Out>
  [[nodiscard]] Work send_recv_async(In&& in, int send_peer, Out&& out, int recv_peer,
                                     std::optional<gpu::Stream> stream = std::nullopt) {
    const void* s = std::ranges::data(in);
    void* r = std::ranges::data(out);
    return stream ? send_recv_async(s, size_of(in), send_peer, r, size_of(out), recv_peer,
                                    dtype_of<In>(), *stream)
                  : send_recv_async(s, size_of(in), send_peer, r, size_of(out), recv_peer,
                                    dtype_of<In>());
  }

  // ---- groups --------------------------------------------------------------------------------
  // Collective over this communicator: ranks passing the same color form a new communicator,
  // ordered by (key, rank). kNoColor returns nullopt. Uses this communicator's store; no new
  // rendezvous. `name` names the group in its errors ("tp group 0"; default "split group
  // <color>"): a group's errors name each rank they mention as "rank 1 of tp group 0 (world rank
  // 3)", and its failures reach chorus-run in world ranks, as the world's do.
  std::optional<Communicator> split(int color, int key, std::string_view name = {});
  // The name split() gave this group (empty for a world communicator), and the world rank of
  // each of its ranks (a world communicator's own ranks; nested splits go back to the world).
  const std::string& group_name() const;
  int world_rank(int rank) const;
  // The host of `rank`, by the host identity every rank publishes at set-up (CHORUS_HOST_ID,
  // else hostname + boot id): ranks with equal indices share one; hosts are numbered in order of
  // their lowest rank (rank 0's is 0). Local: no communication.
  int host_of(int rank) const;
  // The link the cost model prices this communicator's flat algorithms on (chorus/cost_model.h):
  // "ucx" when its ranks span hosts or reach each other only over UCX (CHORUS_TRANSPORT=ucx),
  // else "shm"; for device buffers, "ipc" where they move by IPC (docs/GPU.md; on pinned-host
  // staging the host algorithms run on host memory, priced as host buffers are). chorus-tune
  // files the constants it fits under it. Local: no communication.
  std::string_view priced_link(BufferMemory where = BufferMemory::kHost) const;

  // ---- algorithms ----------------------------------------------------------------------------
  // Forces an algorithm ("ring", "tree", "direct", ...) for later calls, or "auto". A "/fifo"
  // suffix ("ring/fifo") also makes its messages between ranks of one host copy through the
  // shared-memory FIFO instead of being read single-copy (docs/perf/collectives.md, "Tuner"). Every
  // rank must make the same call at the same point. Throws InvalidArgument for an unknown name.
  void set_algorithm(std::string_view name);
  // The algorithm the selector picks for a collective of `bytes` per rank buffer, on buffers
  // in `where`.
  std::string algorithm_for(Collective c, size_t bytes,
                            BufferMemory where = BufferMemory::kHost) const;
  // Every algorithm registered for `c`, with its predicted time for `bytes` (as algorithm_for
  // counts them) on buffers in `where`, and which one the selector would pick (in deterministic
  // mode, of a reduction: only those that fold in rank order). Local: no communication.
  std::vector<AlgorithmEstimate> explain(Collective c, size_t bytes,
                                         BufferMemory where = BufferMemory::kHost) const;
  // The ring the ring, chain and tree algorithms are laid over: element p is the rank at ring
  // position p. Ranks are grouped by host, then socket, NUMA node and the CPU they are bound to,
  // so the ring crosses each slower link the fewest times (rank order when nothing tells ranks
  // apart, or with CHORUS_RING=rank). It starts at rank 0; the same on every rank.
  std::vector<int> ring_order() const;

  // Waits for every queued operation (errors stay with their Work handles).
  void synchronize();

  // ---- device memory the application keeps (docs/GPU.md, "Buffer lifetime") -----------------
  // Between ranks of one host, peers read a rank's device memory through IPC; by default only
  // device memory the communicator owns (each message copied through it), so that the application
  // may free and reallocate its buffers at any time. Registered memory goes straight to the peers
  // instead (no copy), who keep it mapped: the application keeps it allocated until a
  // deregistration that covers it, or the communicator's destruction, has returned on every rank.
  // Registration is local (no peer takes part) and waits for the operations issued before it;
  // `[ptr, ptr + bytes)` must be device memory of one plain allocation (cudaMalloc / hipMalloc)
  // and overlap no other registration (InvalidArgument otherwise). Where device buffers do not
  // move through IPC (pinned-host staging, other hosts, no device) it records nothing.
  void register_device_memory(const void* ptr, size_t bytes);
  // Collective: every rank calls it, each with a pointer it registered (or nullptr for none), in
  // the same place among its operations. Returns once no rank maps any rank's registered memory
  // (all of it, not only this pointer's; what stays registered is mapped again when next used):
  // `ptr` may then be freed. InvalidArgument, before anything is done, for a pointer that was not
  // registered here.
  void deregister_device_memory(const void* ptr);

  // ---- failure handling ----------------------------------------------------------------------
  // Deadline for operations issued from now on (0 = back to CommOptions / CHORUS_TIMEOUT;
  // chorus::kNoDeadline or longer = none). An
  // operation past its deadline fails with chorus::Timeout naming the ranks it waited for, and
  // the communicator becomes unusable: later calls fail fast.
  void set_timeout(std::chrono::milliseconds timeout);
  // Fails the operation in progress and every later one on this rank, and tells the peers: their
  // pending and later operations fail promptly with chorus::PeerFailure naming this rank and
  // `reason`. Destroying the communicator afterwards is still required.
  void abort(std::string_view reason = {});
  // The flight recorder (last CHORUS_FR_ENTRIES operations) as one JSON document.
  std::string flight_recorder_json() const;

  struct Impl;

 private:
  explicit Communicator(std::shared_ptr<Impl> impl);

  // The typed forms' arguments, after the sizes were checked.
  struct Typed {
    const void* send = nullptr;
    void* recv = nullptr;
    size_t count = 0;
    DataType dtype = DataType::kF32;
  };
  template <class B>
  static constexpr DataType dtype_of() {
    return kDataTypeOf<BufferElement<B>>;
  }
  template <class B>
  static size_t size_of(B&& buffer) {
    return detail::buffer_size(buffer);
  }
  size_t ranks() const { return static_cast<size_t>(size()); }
  // all_to_all's per-rank block: the size of `in` divided by size(), which must divide it.
  template <class B>
  size_t block_of(B&& in) const {
    check_divisible("all_to_all", "in", size_of(in), ranks());
    return size_of(in) / ranks();
  }
  // Checks that `in` holds count * in_blocks elements and `out` count * out_blocks (only where
  // the call uses them: `in_used`, `out_used`); nullptr stands for a buffer the call lacks.
  template <class In, class Out>
  static Typed typed(const char* call, In&& in, Out&& out, size_t count, size_t in_blocks,
                     bool in_used, size_t out_blocks, bool out_used) {
    Typed t;
    t.count = count;
    if constexpr (!std::is_same_v<std::remove_cvref_t<In>, std::nullptr_t>) {
      if (in_used) check_size(call, "in", size_of(in), count, in_blocks);
      t.send = std::ranges::data(in);
      t.dtype = dtype_of<In>();
    }
    if constexpr (!std::is_same_v<std::remove_cvref_t<Out>, std::nullptr_t>) {
      if (out_used) check_size(call, "out", size_of(out), count, out_blocks);
      t.recv = std::ranges::data(out);
      t.dtype = dtype_of<Out>();
    }
    return t;
  }
  // InvalidArgument unless `have` == count * blocks.
  static void check_size(const char* call, const char* name, size_t have, size_t count,
                         size_t blocks);
  static void check_divisible(const char* call, const char* name, size_t have, size_t blocks);

  std::shared_ptr<Impl> impl_;
  std::unique_ptr<SelfMessages> self_;  // sent to this rank, not received yet (made on first use)
};

}  // namespace chorus
