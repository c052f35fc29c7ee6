// chorus — the Communicator: a group of ranks and the collectives they run together.
//
// Buffers are pointer + count (elements, never bytes) + DataType. In-place follows NCCL's rules:
//   all_reduce      in place when send == recv
//   reduce_scatter  in place when send + rank * recv_count elements == recv
//   all_gather      in place when send == recv + rank * send_count elements
//   broadcast/reduce in place when send == recv
//   gather          in place (root) when send == recv + root * send_count; scatter (root) when
//                   recv == send + root * recv_count
// Other overlaps between send and recv are rejected. Every call has an *_async form returning a
// Work; the blocking form is the async one plus wait(). Operations on one communicator complete
// in the order they were issued, and every rank must issue the same collectives in the same
// order (point-to-point calls pair by order between each two ranks).
//
// Threading: one thread at a time may issue calls on a Communicator (like NCCL); Work handles may
// be waited on from any thread. Each Communicator has one progress thread that runs queued
// operations; a blocking call issued while nothing is queued runs directly in the caller.
//
// Device memory. Every call takes host or device buffers (CUDA or HIP, whichever chorus was built
// with; managed memory counts as device memory, pinned host memory as host memory). The buffers
// of one call must all be host memory or all device memory of one device (InvalidArgument
// naming them otherwise), and a communicator works with one device, fixed by its first device
// operation. Ranks need not agree: one may pass device buffers and another host buffers to the
// same collective. Device memory travels through pinned host staging memory and the same
// algorithms as host memory (docs/GPU.md).
//
// Streams. The *_async forms ending in a gpu::Stream are stream-ordered, with NCCL's semantics:
// the operation starts after all work already queued on `stream`, and work queued on `stream`
// afterwards waits for it, on the device, without blocking the calling thread. The returned
// Work's wait() blocks the host until the operation is done (outputs in place). Host buffers with
// a stream are allowed: the operation runs on them after the stream's earlier work (the stream
// must belong to the communicator's device). The plain forms with device buffers are ordered on
// the default stream gpu::Stream{} (the legacy default stream); the blocking ones return once
// the operation is done. A stream being captured into a graph is rejected (InvalidArgument:
// chorus operations cannot be part of a graph). Device operations always run on the progress
// thread, in issue order with the host ones. When one fails, its Work carries the error (a
// gpu::GpuError, PeerFailure, Timeout ...), its outputs are undefined, the stream is released
// all the same, and the communicator is broken as after any failure; destroying the communicator
// releases every stream still waiting for it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>
#include <string_view>

#include "chorus/error.h"
#include "chorus/gpu/runtime.h"
#include "chorus/store.h"
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
// tuner's cost model predicts for it on this communicator (docs/PERFORMANCE.md, "Tuner").
struct AlgorithmEstimate {
  std::string algorithm;      // "ring", "tree", "direct", ..., "ring/fifo", ...
  double predicted_us = -1;   // model time per call in microseconds; < 0: no estimate
  bool chosen = false;        // what the selector uses (after set_algorithm / CHORUS_ALGO)
};

// Returned by split() to ranks that pass kNoColor.
inline constexpr int kNoColor = -1;

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
// ranks >= 2 make one more pass over their segment than in the default mode; docs/PERFORMANCE.md
// ("Deterministic reductions") measures it. Communicators made by split() inherit the mode.
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
  Work all_reduce_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  Work reduce_scatter_async(const void* send, void* recv, size_t recv_count, DataType dtype,
                            ReduceOp op);
  Work all_gather_async(const void* send, void* recv, size_t send_count, DataType dtype);
  // Root's send is broadcast into every rank's recv (send is only read on the root).
  Work broadcast_async(const void* send, void* recv, size_t count, DataType dtype, int root);
  // recv is only written on the root (may be null elsewhere).
  Work reduce_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                    int root);
  // The root's recv gets size() * send_count elements, rank i's at offset i * send_count.
  Work gather_async(const void* send, void* recv, size_t send_count, DataType dtype, int root);
  // Rank i's recv gets the root's send[i * recv_count ...].
  Work scatter_async(const void* send, void* recv, size_t recv_count, DataType dtype, int root);
  // send holds size() blocks of `count`; block j goes to rank j, whose recv block i it fills.
  Work all_to_all_async(const void* send, void* recv, size_t count, DataType dtype);
  Work barrier_async();
  Work send_async(const void* send, size_t count, DataType dtype, int peer);
  Work recv_async(void* recv, size_t count, DataType dtype, int peer);
  // Sends to send_peer and receives from recv_peer at once (no ordering deadlock).
  Work send_recv_async(const void* send, size_t send_count, int send_peer, void* recv,
                       size_t recv_count, int recv_peer, DataType dtype);

  // ---- stream-ordered forms (see "Streams" above) ------------------------------------------
  Work all_reduce_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                        gpu::Stream stream);
  Work reduce_scatter_async(const void* send, void* recv, size_t recv_count, DataType dtype,
                            ReduceOp op, gpu::Stream stream);
  Work all_gather_async(const void* send, void* recv, size_t send_count, DataType dtype,
                        gpu::Stream stream);
  Work broadcast_async(const void* send, void* recv, size_t count, DataType dtype, int root,
                       gpu::Stream stream);
  Work reduce_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                    int root, gpu::Stream stream);
  Work gather_async(const void* send, void* recv, size_t send_count, DataType dtype, int root,
                    gpu::Stream stream);
  Work scatter_async(const void* send, void* recv, size_t recv_count, DataType dtype, int root,
                     gpu::Stream stream);
  Work all_to_all_async(const void* send, void* recv, size_t count, DataType dtype,
                        gpu::Stream stream);
  // Later work on `stream` waits until every rank has reached the barrier.
  Work barrier_async(gpu::Stream stream);
  Work send_async(const void* send, size_t count, DataType dtype, int peer, gpu::Stream stream);
  Work recv_async(void* recv, size_t count, DataType dtype, int peer, gpu::Stream stream);
  Work send_recv_async(const void* send, size_t send_count, int send_peer, void* recv,
                       size_t recv_count, int recv_peer, DataType dtype, gpu::Stream stream);

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
  void send(const void* buf, size_t count, DataType dtype, int peer);
  void recv(void* buf, size_t count, DataType dtype, int peer);
  void send_recv(const void* send, size_t send_count, int send_peer, void* recv,
                 size_t recv_count, int recv_peer, DataType dtype);

  // ---- typed spans ---------------------------------------------------------------------------
  template <class T> void all_reduce(std::span<T> data, ReduceOp op) {
    all_reduce(data.data(), data.data(), data.size(), kDataTypeOf<std::remove_const_t<T>>, op);
  }
  template <class T> void all_reduce(std::span<const T> in, std::span<T> out, ReduceOp op) {
    CHORUS_ARG_CHECK(in.size() == out.size(), "all_reduce: in has ", in.size(),
                     " elements but out has ", out.size());
    all_reduce(in.data(), out.data(), in.size(), kDataTypeOf<T>, op);
  }
  template <class T> void broadcast(std::span<T> data, int root) {
    broadcast(data.data(), data.data(), data.size(), kDataTypeOf<T>, root);
  }
  template <class T> void all_gather(std::span<const T> in, std::span<T> out) {
    CHORUS_ARG_CHECK(out.size() == in.size() * static_cast<size_t>(size()),
                     "all_gather: out must hold size() * in.size() = ", in.size() * size(),
                     " elements, has ", out.size());
    all_gather(in.data(), out.data(), in.size(), kDataTypeOf<T>);
  }
  template <class T> void reduce_scatter(std::span<const T> in, std::span<T> out, ReduceOp op) {
    CHORUS_ARG_CHECK(in.size() == out.size() * static_cast<size_t>(size()),
                     "reduce_scatter: in must hold size() * out.size() = ", out.size() * size(),
                     " elements, has ", in.size());
    reduce_scatter(in.data(), out.data(), out.size(), kDataTypeOf<T>, op);
  }

  // ---- groups --------------------------------------------------------------------------------
  // Collective over this communicator: ranks passing the same color form a new communicator,
  // ordered by (key, rank). kNoColor returns nullopt. Uses this communicator's store; no new
  // rendezvous.
  std::optional<Communicator> split(int color, int key);

  // ---- algorithms ----------------------------------------------------------------------------
  // Forces an algorithm ("ring", "tree", "direct", ...) for later calls, or "auto". A "/fifo"
  // suffix ("ring/fifo") also makes its messages between ranks of one host copy through the
  // shared-memory FIFO instead of being read single-copy (docs/PERFORMANCE.md, "Tuner"). Every
  // rank must make the same call at the same point. Throws InvalidArgument for an unknown name.
  void set_algorithm(std::string_view name);
  // The algorithm the selector picks for a collective of `bytes` per rank buffer.
  std::string algorithm_for(Collective c, size_t bytes) const;
  // Every algorithm registered for `c`, with its predicted time for `bytes` (as algorithm_for
  // counts them) and which one the selector would pick (in deterministic mode, of a reduction:
  // only those that fold in rank order). Local: no communication.
  std::vector<AlgorithmEstimate> explain(Collective c, size_t bytes) const;
  // The ring the ring, chain and tree algorithms are laid over: element p is the rank at ring
  // position p. Ranks are grouped by host, then socket, NUMA node and the CPU they are bound to,
  // so the ring crosses each slower link the fewest times (rank order when nothing tells ranks
  // apart, or with CHORUS_RING=rank). It starts at rank 0; the same on every rank.
  std::vector<int> ring_order() const;

  // Waits for every queued operation (errors stay with their Work handles).
  void synchronize();

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
  std::shared_ptr<Impl> impl_;
};

}  // namespace chorus
