// chorus — what an algorithm is: a function of (context, arguments), registered with an id, a
// name, the collective it implements and a line of description (like UCC's algorithm tables;
// the table itself is algo/registry.h, the choice among its entries algo/selector.h).
//
// Algorithms are written once against the Exchange (post send / recv / recv-reduce, wait); they
// never name a transport. The communicator validates arguments, handles world size 1, and calls
// exactly one algorithm per operation. Every algorithm leaves identical bits on every rank that
// receives a reduced result (reductions happen once, in a fixed order, then travel).
//
// Rank order (CHORUS_DETERMINISTIC, Context::rank_order): some reductions fold every element as
// x_0 op x_1 op ... op x_{n-1}, one rounding per step, so that their bits depend on nothing but
// the inputs: not on the algorithm, the chunk size, the ring or where ranks run. The direct
// algorithms fold in rank order always, and round f16/bf16 once per step when the context asks
// (reduce_inbox()); the two-shot ones fold in rank order when it asks
// (reduce_scatter_direct_step()). folds_in_rank_order() says which algorithms can.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "algo/patterns.h"
#include "chorus/communicator.h"
#include "chorus/types.h"
#include "exchange.h"

namespace chorus::algo {

enum class Algorithm : uint8_t { kRing, kTree, kDirect, kHier, kTwoShot, kFanout };
std::string_view to_string(Algorithm a);
std::optional<Algorithm> parse_algorithm(std::string_view name);
// "ring, tree, direct, hier, twoshot, fanout": every algorithm name, for error messages.
std::string algorithm_names();
// Whether `a` applies to a communicator spanning `hosts` hosts (hier needs more than one, fanout
// one host).
bool runs_on_hosts(Algorithm a, int hosts);
// Whether `a`, run with Context::rank_order, folds the reductions of `coll` in rank order: direct
// and twoshot do; ring, tree and hier do not. True for every collective that does not reduce.
bool folds_in_rank_order(Collective coll, Algorithm a);

// How the messages of an operation travel between ranks of one host, above the transport's
// single-copy threshold: kSingleCopy lets the receiver read the sender's buffer in one copy
// (shm: process_vm_readv); kFifo copies through the shared-memory FIFO instead: the sender
// copies in, the receiver copies (or reduces) out, pipelined in slots. Single copy moves fewer
// bytes, but the receiver's core does all the work and the kernel pins every page per call;
// through the FIFO the sender's core takes half of it and a reducing receiver reads its input
// from cache. Which wins depends on the collective, the size and the machine, so the tuner
// measures both (docs/PERFORMANCE.md). Transports without single copy ignore it.
enum class Path : uint8_t { kSingleCopy, kFifo };

// An algorithm and its path: what the selector picks and the tune table keys its curves by.
// Named "<algorithm>" (single copy) or "<algorithm>/fifo".
struct Variant {
  Algorithm algo = Algorithm::kRing;
  Path path = Path::kSingleCopy;
  constexpr Variant() = default;
  constexpr Variant(Algorithm a, Path p = Path::kSingleCopy) : algo(a), path(p) {}  // NOLINT
  friend bool operator==(const Variant&, const Variant&) = default;
  friend auto operator<=>(const Variant&, const Variant&) = default;
};
// Whether the algorithm's sends differ between the two paths. Fanout's do not: its root writes
// into a shared buffer, neither single copy nor through a FIFO ("fanout/fifo" names the same).
bool has_paths(Algorithm a);
// Static storage: "ring", "ring/fifo", ...
std::string_view to_string(Variant v);
std::optional<Variant> parse_variant(std::string_view name);

// How an algorithm touches the memory its buffers live in, when that is not host memory: local
// copies, reductions and the avg division, plus scratch memory of the same kind. Every call has
// finished when it returns (the data may be read or sent at once). Host memory needs none of
// this: a null MemoryOps* means host memory, and the helpers below then call the CPU kernels
// directly (no virtual call on the host path).
class MemoryOps {
 public:
  virtual ~MemoryOps() = default;
  // dst and src must not overlap.
  virtual void copy(std::byte* dst, const std::byte* src, size_t bytes) = 0;
  // dst = srcs[0] op ... op srcs[n-1], folded left to right (dst may be one of the sources).
  virtual void reduce_n(DataType dtype, ReduceOp op, std::byte* dst, const void* const* srcs, int n,
                        size_t count) = 0;
  virtual void divide(DataType dtype, std::byte* dst, const std::byte* src, size_t count,
                      int64_t divisor) = 0;
  // Scratch of this memory kind, as Scratch::get.
  virtual std::byte* scratch(size_t slot, size_t bytes) = 0;
};

// One operation's arguments, validated. Counts in elements.
struct CollArgs {
  Collective coll = Collective::kAllReduce;
  const std::byte* send = nullptr;
  std::byte* recv = nullptr;
  size_t count = 0;  // see Communicator: all_reduce count, reduce_scatter recv_count, ...
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  int peer = -1;          // send / recv / send_recv's send peer (recv: kAnySource too)
  size_t recv_count = 0;  // send_recv
  int recv_peer = -1;     // send_recv (kAnySource too)
  int tag = 0;            // send / recv / send_recv's send: the message's tag
  int recv_tag = 0;       // send_recv's receive
  // Where send, recv and the scratch live: null = host memory; else device memory, touched
  // through these operations (a communicator's IPC path, docs/GPU.md).
  MemoryOps* mem = nullptr;

  size_t elem() const { return dtype_size(dtype); }
  size_t bytes() const { return count * elem(); }
};

// Scratch memory an algorithm may use; grows on demand and is reused across operations. Host
// memory, or while use_memory() says so, the scratch of that MemoryOps (device memory for an
// operation on the IPC path).
class Scratch {
 public:
  std::byte* get(size_t slot, size_t bytes) {
    if (mem_ != nullptr) [[unlikely]]
      return mem_->scratch(slot, bytes);
    return get_host(slot, bytes);
  }
  // Hands out `mem`'s scratch until called again with null (host memory).
  void use_memory(MemoryOps* mem) { mem_ = mem; }

 private:
  std::byte* get_host(size_t slot, size_t bytes);
  struct Buffer {
    std::byte* data = nullptr;
    size_t bytes = 0;
  };
  std::vector<Buffer> buffers_;
  MemoryOps* mem_ = nullptr;

 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch();
};

struct Context {
  int rank;
  int size;
  Exchange& ex;
  Scratch& scratch;
  size_t chunk_bytes;            // pipelining unit (CHORUS_CHUNK_BYTES), a multiple of 64
  std::span<const int> host_of;  // host index of every rank; equal indices share memory
  // The ring (Communicator::ring_order()): ring[p] is the rank at ring position p, and
  // ring_pos[r] the position of rank r. Rings and trees are laid over positions, so neighbours
  // in them are neighbours in the machine. Empty = rank order.
  std::span<const int> ring;
  std::span<const int> ring_pos;
  // Results of at least this many bytes are written with streaming stores where
  // stream_results() says so (CHORUS_STREAM_FROM).
  size_t stream_from_bytes = SIZE_MAX;
  // Fold every reduction in rank order, rounding once per step (CHORUS_DETERMINISTIC): the
  // helpers below honour it; only algorithms that folds_in_rank_order() run with it.
  bool rank_order = false;
  // Set by a point-to-point receive: the rank whose message it took (Work::source()).
  int source = -1;
};

using AlgoFn = void (*)(Context&, const CollArgs&);

// ---- helpers shared by algorithm files --------------------------------------------------------
// The rank at ring position `pos` (taken modulo the size), and the ring position of `rank`.
inline int rank_at(const Context& c, int pos) {
  const int p = ((pos % c.size) + c.size) % c.size;
  return c.ring.empty() ? p : c.ring[static_cast<size_t>(p)];
}
inline int pos_of(const Context& c, int rank) {
  return c.ring_pos.empty() ? rank : c.ring_pos[static_cast<size_t>(rank)];
}
// A tree node computed over ring positions (patterns.h), with its neighbours named as ranks.
inline TreeNode on_ring(const Context& c, TreeNode t) {
  if (t.parent >= 0) t.parent = rank_at(c, t.parent);
  for (int& child : t.child)
    if (child >= 0) child = rank_at(c, child);
  return t;
}
// Elements per pipelining chunk for this dtype (at least 1).
inline size_t chunk_elems(const Context& c, DataType dtype) {
  const size_t e = c.chunk_bytes / dtype_size(dtype);
  return e > 0 ? e : 1;
}
// The reduction op applied while data travels (kAvg sums; the finish divides).
inline ReduceOp travel_op(ReduceOp op) { return op == ReduceOp::kAvg ? ReduceOp::kSum : op; }
// Whether the receives that write a call's result (`bytes` of it on this rank) use streaming
// stores (Exchange::post_recv's `stream`): when the result is too large to stay in cache anyway
// and the receives write lines this rank has not just read, where every cached store to a line
// first reads it. So: broadcast and all-gather in place or not (what they receive is never this
// rank's input), the reductions only out of place (in place, each result line is the input line
// the reduction has just read, in cache). Not in device memory, not for kAvg (the result is read
// back to divide).
bool stream_results(const Context& c, const CollArgs& a, size_t bytes);
// The helpers below touch the call's buffers in the memory they live in (a.mem: host memory when
// null). Algorithm files make every local copy and reduction through them, never with
// std::memcpy or the CPU kernels directly, so that they run unchanged on device buffers.
//
// Finishes kAvg on a result: divides `count` elements at `buf` by the world size.
void finish_avg(const CollArgs& a, std::byte* buf, size_t count, int world_size);
// The reduction step of the direct algorithms: dst = the reduction, in rank order, of this
// rank's `mine` and every peer p's block at inbox + p * a.bytes() (a.count elements each; the
// block at this rank's own index is free scratch). f16 and bf16 accumulate in f32 and round once
// (kernels::reduce_n); with c.rank_order they round after every step instead, as a chain of
// receive-reduces does, so that every rank-ordered algorithm gives the same bits.
void reduce_inbox(const Context& c, const CollArgs& a, std::byte* dst, const std::byte* mine,
                  std::byte* inbox);
// dst = the reduction of n inputs (a.dtype, travel_op(a.op)), `count` elements each.
void reduce_n(const CollArgs& a, std::byte* dst, const void* const* srcs, int n, size_t count);
// Step 1 of the two-shot algorithms, a direct reduce-scatter: the buffer is cut into `size`
// segments (segment()); every rank sends segment p of a.send to rank p and folds the n-1 copies
// of its own segment it receives into `own`, its own input first, then from rank+1, rank+2, ...
// (so that the ranks read different peers at once). With c.rank_order it folds rank 0's copy
// first, then rank 1's, ..., its own in its place, which costs ranks >= 2 one pass more (a plain
// receive of rank 0's copy, or for rank 1 where the op does not commute), and, when `own` is
// this rank's input segment (in place), scratch slot 1 for the partial that precedes it.
// Returns once every send of the step has finished (a caller may then overwrite a.send).
void reduce_scatter_direct_step(Context& c, const CollArgs& a, std::byte* own);
// Copy of `bytes` when src != dst (the ranges do not overlap otherwise).
// `stream`: with streaming stores (host memory; stream_results()).
void copy_if_distinct(const CollArgs& a, std::byte* dst, const std::byte* src, size_t bytes,
                      bool stream = false);
// The same for host memory only (kept for callers that have no CollArgs at hand).
void copy_if_distinct(std::byte* dst, const std::byte* src, size_t bytes);

// Algorithm entry points (one file each: <collective>_<algorithm>.cc).
void all_reduce_ring(Context&, const CollArgs&);
void all_reduce_tree(Context&, const CollArgs&);
void all_reduce_direct(Context&, const CollArgs&);
void all_reduce_twoshot(Context&, const CollArgs&);
void all_reduce_hier(Context&, const CollArgs&);
void reduce_scatter_ring(Context&, const CollArgs&);
void reduce_scatter_direct(Context&, const CollArgs&);
void reduce_scatter_twoshot(Context&, const CollArgs&);
void all_gather_ring(Context&, const CollArgs&);
void all_gather_direct(Context&, const CollArgs&);
void all_gather_fanout(Context&, const CollArgs&);
void broadcast_ring(Context&, const CollArgs&);
void broadcast_tree(Context&, const CollArgs&);
void broadcast_direct(Context&, const CollArgs&);
void broadcast_fanout(Context&, const CollArgs&);
void reduce_ring(Context&, const CollArgs&);
void reduce_tree(Context&, const CollArgs&);
void reduce_direct(Context&, const CollArgs&);
void reduce_twoshot(Context&, const CollArgs&);
void gather_direct(Context&, const CollArgs&);
void scatter_direct(Context&, const CollArgs&);
void all_to_all_direct(Context&, const CollArgs&);
void barrier_direct(Context&, const CollArgs&);
void send_direct(Context&, const CollArgs&);
void recv_direct(Context&, const CollArgs&);
void send_recv_direct(Context&, const CollArgs&);

}  // namespace chorus::algo
