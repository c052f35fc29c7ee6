// The algorithm table, the fixed size thresholds, and the helpers algorithm files share.
#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "algo/registry.h"
#include "chorus/error.h"
#include "chorus/kernels/cpu.h"

namespace chorus::algo {
namespace {

// What the entries need (AlgoEntry::supports).
std::string anywhere(Algorithm, const Capabilities&) { return {}; }

// Fanout's readers copy out of one buffer shared by every rank, which only the shm transport
// between ranks of one host provides. (Hier runs anywhere: on one host it is a reduce-scatter
// and an all-gather; the selector offers it only across hosts, algo/selector.h.)
std::string one_shared_buffer(Algorithm a, const Capabilities& c) {
  if (!runs_on_hosts(a, c.hosts))
    return detail::concat(to_string(a), " needs every rank on one host; these ranks span ", c.hosts,
                          " hosts");
  if (!c.fans_out)
    return detail::concat(to_string(a),
                          " needs a buffer shared by every rank, which this communicator's "
                          "transport does not give");
  return {};
}

constexpr AlgoEntry kAlgorithms[] = {
    {Collective::kAllReduce, Algorithm::kRing, all_reduce_ring,
     "reduce-scatter + all-gather around a ring; bandwidth-optimal", anywhere},
    {Collective::kAllReduce, Algorithm::kTree, all_reduce_tree,
     "double binary tree, half the data on each; log-depth latency", anywhere},
    {Collective::kAllReduce, Algorithm::kDirect, all_reduce_direct,
     "one-shot: every rank reduces all inputs itself; small messages", anywhere},
    {Collective::kAllReduce, Algorithm::kTwoShot, all_reduce_twoshot,
     "two-shot: direct reduce-scatter, then direct all-gather; two steps, bandwidth-optimal",
     anywhere},
    {Collective::kAllReduce, Algorithm::kHier, all_reduce_hier,
     "hierarchical: reduce-scatter in each host, all-reduce across hosts per rail, all-gather",
     anywhere},
    {Collective::kReduceScatter, Algorithm::kRing, reduce_scatter_ring, "ring, n-1 steps",
     anywhere},
    {Collective::kReduceScatter, Algorithm::kDirect, reduce_scatter_direct, "one-shot", anywhere},
    {Collective::kReduceScatter, Algorithm::kTwoShot, reduce_scatter_twoshot,
     "the two-shot's first step: every rank reads its block from each peer and folds it in",
     anywhere},
    {Collective::kAllGather, Algorithm::kRing, all_gather_ring, "ring, n-1 steps", anywhere},
    {Collective::kAllGather, Algorithm::kDirect, all_gather_direct, "one-shot", anywhere},
    {Collective::kAllGather, Algorithm::kFanout, all_gather_fanout,
     "every rank writes its block once into a shared buffer all others copy out of; one host",
     one_shared_buffer},
    {Collective::kBroadcast, Algorithm::kRing, broadcast_ring, "pipelined chain from the root",
     anywhere},
    {Collective::kBroadcast, Algorithm::kTree, broadcast_tree, "pipelined binary tree", anywhere},
    {Collective::kBroadcast, Algorithm::kDirect, broadcast_direct, "root sends to all", anywhere},
    {Collective::kBroadcast, Algorithm::kFanout, broadcast_fanout,
     "root writes each piece once into a shared buffer every rank copies out of; one host",
     one_shared_buffer},
    {Collective::kReduce, Algorithm::kRing, reduce_ring, "pipelined chain to the root", anywhere},
    {Collective::kReduce, Algorithm::kTree, reduce_tree, "pipelined binary tree", anywhere},
    {Collective::kReduce, Algorithm::kDirect, reduce_direct, "all send to the root", anywhere},
    {Collective::kReduce, Algorithm::kTwoShot, reduce_twoshot,
     "reduce-scatter, then gather to the root; every rank reduces 1/n", anywhere},
    {Collective::kGather, Algorithm::kDirect, gather_direct, "all send to the root", anywhere},
    {Collective::kScatter, Algorithm::kDirect, scatter_direct, "root sends to all", anywhere},
    {Collective::kAllToAll, Algorithm::kDirect, all_to_all_direct, "staggered pairwise", anywhere},
    {Collective::kBarrier, Algorithm::kDirect, barrier_direct, "dissemination", anywhere},
    {Collective::kSend, Algorithm::kDirect, send_direct, "point-to-point", anywhere},
    {Collective::kRecv, Algorithm::kDirect, recv_direct, "point-to-point", anywhere},
    {Collective::kSendRecv, Algorithm::kDirect, send_recv_direct, "point-to-point pair", anywhere},
};

}  // namespace

std::string_view to_string(Algorithm a) {
  switch (a) {
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kDirect:
      return "direct";
    case Algorithm::kHier:
      return "hier";
    case Algorithm::kTwoShot:
      return "twoshot";
    case Algorithm::kFanout:
      return "fanout";
  }
  return "?";
}

namespace {
constexpr Algorithm kEveryAlgorithm[] = {Algorithm::kRing, Algorithm::kTree,    Algorithm::kDirect,
                                         Algorithm::kHier, Algorithm::kTwoShot, Algorithm::kFanout};
}  // namespace

std::optional<Algorithm> parse_algorithm(std::string_view name) {
  for (Algorithm a : kEveryAlgorithm)
    if (to_string(a) == name) return a;
  return std::nullopt;
}

std::string algorithm_names() {
  std::string names;
  for (Algorithm a : kEveryAlgorithm)
    names += (names.empty() ? "" : ", ") + std::string(to_string(a));
  return names + " (each also as <name>/fifo)";
}

bool runs_on_hosts(Algorithm a, int hosts) {
  if (a == Algorithm::kHier) return hosts > 1;
  if (a == Algorithm::kFanout) return hosts == 1;
  return true;
}

bool folds_in_rank_order(Collective coll, Algorithm a) {
  const bool reduces = coll == Collective::kAllReduce || coll == Collective::kReduceScatter ||
                       coll == Collective::kReduce;
  return !reduces || a == Algorithm::kDirect || a == Algorithm::kTwoShot;
}

bool has_paths(Algorithm a) { return a != Algorithm::kFanout; }

std::string_view to_string(Variant v) {
  if (v.path == Path::kSingleCopy) return to_string(v.algo);
  switch (v.algo) {
    case Algorithm::kRing:
      return "ring/fifo";
    case Algorithm::kTree:
      return "tree/fifo";
    case Algorithm::kDirect:
      return "direct/fifo";
    case Algorithm::kHier:
      return "hier/fifo";
    case Algorithm::kTwoShot:
      return "twoshot/fifo";
    case Algorithm::kFanout:
      return "fanout/fifo";
  }
  return "?";
}

std::optional<Variant> parse_variant(std::string_view name) {
  constexpr std::string_view kFifoSuffix = "/fifo";
  Path path = Path::kSingleCopy;
  if (name.size() > kFifoSuffix.size() && name.ends_with(kFifoSuffix)) {
    name.remove_suffix(kFifoSuffix.size());
    path = Path::kFifo;
  }
  auto a = parse_algorithm(name);
  if (!a) return std::nullopt;
  return Variant{*a, path};
}

std::span<const AlgoEntry> all_algorithms() { return kAlgorithms; }

std::string supports(const AlgoEntry& e, const Capabilities& caps) {
  return e.supports(e.algo, caps);
}

const AlgoEntry* find_algorithm(Collective coll, Algorithm algo) {
  for (const auto& e : kAlgorithms)
    if (e.coll == coll && e.algo == algo) return &e;
  return nullptr;
}

// Thresholds from first measurements on a 2-core host (docs/PERFORMANCE.md); the tuner of the
// performance work replaces them with measured constants.
Algorithm select_default(Collective coll, size_t bytes, int world_size) {
  switch (coll) {
    case Collective::kAllReduce:
      if (bytes <= 16 * 1024) return Algorithm::kDirect;
      if (bytes <= 256 * 1024 && world_size > 2) return Algorithm::kTree;
      return Algorithm::kRing;
    case Collective::kReduceScatter:
      return bytes <= 32 * 1024 ? Algorithm::kDirect : Algorithm::kRing;
    case Collective::kAllGather:
      // Two ranks: the ring and the direct exchange are the same single step, and the direct
      // one pushes its block (all_gather_direct.cc), which measured steadier from launch to
      // launch than the ring's pull (np=2, 256 KiB: 7.5-7.7 us against 7.7-9.4) and faster up
      // to 32 MiB; past that the ring through the FIFO wins, and holds its time where the push
      // does not (64 MiB: 4.8-5.0 GB/s against 3.5-5.5).
      if (bytes <= 32 * 1024 || (world_size == 2 && bytes <= 32 * 1024 * 1024))
        return Algorithm::kDirect;
      return Algorithm::kRing;
    case Collective::kBroadcast:
    case Collective::kReduce:
      if (bytes <= 16 * 1024) return Algorithm::kDirect;
      if (bytes <= 1024 * 1024 && world_size > 3) return Algorithm::kTree;
      return Algorithm::kRing;
    default:
      return Algorithm::kDirect;
  }
}

// Across hosts, all-reduce goes hierarchical once there are ranks to share a host's network
// traffic (more ranks than hosts) and the message is past one-shot size.
Algorithm select_default(Collective coll, size_t bytes, int world_size,
                         std::span<const int> host_of) {
  const int hosts = host_of.empty() ? 1 : *std::max_element(host_of.begin(), host_of.end()) + 1;
  if (coll == Collective::kAllReduce && hosts > 1 && world_size > hosts && bytes > 16 * 1024)
    return Algorithm::kHier;
  return select_default(coll, bytes, world_size);
}

// The same thresholds as select_default's one-shot ones; above them the two-shot forms, which are
// bandwidth-optimal like the ring and work across hosts like hier.
Algorithm select_rank_ordered(Collective coll, size_t bytes, int world_size) {
  switch (coll) {
    case Collective::kAllReduce:
    case Collective::kReduce:
      return bytes <= 16 * 1024 ? Algorithm::kDirect : Algorithm::kTwoShot;
    case Collective::kReduceScatter:
      return bytes <= 32 * 1024 ? Algorithm::kDirect : Algorithm::kTwoShot;
    default:
      return select_default(coll, bytes, world_size);
  }
}

void finish_avg(const CollArgs& a, std::byte* buf, size_t count, int world_size) {
  if (a.op != ReduceOp::kAvg || count == 0) return;
  if (a.mem != nullptr) [[unlikely]]
    return a.mem->divide(a.dtype, buf, buf, count, world_size);
  kernels::divide(a.dtype, buf, buf, count, world_size);
}

void reduce_n(const CollArgs& a, std::byte* dst, const void* const* srcs, int n, size_t count) {
  if (a.mem != nullptr) [[unlikely]]
    return a.mem->reduce_n(a.dtype, travel_op(a.op), dst, srcs, n, count);
  kernels::reduce_n(a.dtype, travel_op(a.op), dst, srcs, n, count);
}

void reduce_inbox(const Context& c, const CollArgs& a, std::byte* dst, const std::byte* mine,
                  std::byte* inbox) {
  const int n = c.size, rank = c.rank;
  // On the stack for the usual world sizes: direct algorithms are the small-message path, where
  // an allocation per call shows.
  constexpr int kOnStack = 16;
  const void* on_stack[kOnStack];
  std::vector<const void*> on_heap(n > kOnStack ? n : 0);
  const void** srcs = n > kOnStack ? on_heap.data() : on_stack;
  const size_t bytes = a.bytes();
  for (int p = 0; p < n; ++p) srcs[p] = p == rank ? mine : inbox + p * bytes;
  const bool half = a.dtype == DataType::kF16 || a.dtype == DataType::kBF16;
  if (!c.rank_order || !half || n <= 2) return reduce_n(a, dst, srcs, n, a.count);
  // Rounded after every step, as the two-shot's receive-reduces round. In place, dst is `mine`:
  // a rank past the first two keeps its input in its own (free) inbox block until its turn.
  if (dst == mine && rank >= 2) {
    copy_if_distinct(a, inbox + rank * bytes, mine, bytes);
    srcs[rank] = inbox + rank * bytes;
  }
  reduce_n(a, dst, srcs, 2, a.count);
  for (int p = 2; p < n; ++p) {
    const void* step[2] = {dst, srcs[p]};
    reduce_n(a, dst, step, 2, a.count);
  }
}

namespace {

// reduce_scatter_direct_step's fold with Context::rank_order: own = x_0 op x_1 op ... op
// x_{n-1} over the n copies of this rank's segment (`mine`: its own input's), waiting for each
// copy in turn. Every rank has all its sends posted already.
void fold_in_rank_order(Context& c, const CollArgs& a, std::byte* own, const std::byte* mine,
                        size_t count) {
  const int n = c.size, r = c.rank;
  const size_t bytes = count * a.elem();
  const ReduceOp op = travel_op(a.op);
  // Sum and product commute bit for bit (IEEE a + b == b + a; integers wrap), so rank 1 may
  // start from its own input: mine op x_0 is x_0 op mine. Min and max do not (min(-0, +0) is
  // +0, min(+0, -0) is -0).
  const bool commutes = op == ReduceOp::kSum || op == ReduceOp::kProd;
  int next = r + 1;  // the rank whose copy comes next
  if (r == 0) {
    c.ex.wait(c.ex.post_recv_reduce(1, own, mine, count, a.dtype, a.op));
    next = 2;
  } else if (r == 1 && commutes) {
    c.ex.wait(c.ex.post_recv_reduce(0, own, mine, count, a.dtype, a.op));
  } else {
    // The partial of ranks 0..r-1, kept off this rank's input while that is still to be read.
    std::byte* partial = own == mine ? c.scratch.get(1, std::max<size_t>(bytes, 1)) : own;
    c.ex.wait(c.ex.post_recv(0, partial, bytes));
    for (int p = 1; p < r; ++p)
      c.ex.wait(c.ex.post_recv_reduce(p, partial, partial, count, a.dtype, a.op));
    const void* srcs[2] = {partial, mine};
    if (count > 0) reduce_n(a, own, srcs, 2, count);
  }
  for (int p = next; p < n; ++p)
    c.ex.wait(c.ex.post_recv_reduce(p, own, own, count, a.dtype, a.op));
}

}  // namespace

void reduce_scatter_direct_step(Context& c, const CollArgs& a, std::byte* own) {
  const int n = c.size, r = c.rank;
  const size_t es = a.elem();
  const auto seg = [&](int i) {
    return segment(a.count, static_cast<size_t>(n), static_cast<size_t>(i));
  };
  c.ex.step("reduce-scatter");
  for (int k = 1; k < n; ++k) {
    const int p = mod(r + k, n);
    const auto [off, cnt] = seg(p);
    c.ex.post_send(p, a.send + off * es, cnt * es);
  }
  const auto [own_off, own_cnt] = seg(r);
  const std::byte* acc = a.send + own_off * es;
  if (c.rank_order) {
    fold_in_rank_order(c, a, own, acc, own_cnt);
    c.ex.wait_all();
    return;
  }
  for (int k = 1; k < n; ++k) {
    const int p = mod(r + k, n);
    c.ex.wait(c.ex.post_recv_reduce(p, own, acc, own_cnt, a.dtype, a.op));
    acc = own;
  }
  c.ex.wait_all();
}

void copy_if_distinct(const CollArgs& a, std::byte* dst, const std::byte* src, size_t bytes,
                      bool stream) {
  if (dst == src || bytes == 0) return;
  if (a.mem != nullptr) [[unlikely]]
    return a.mem->copy(dst, src, bytes);
  if (stream)
    kernels::copy_stream(dst, src, bytes);
  else
    std::memcpy(dst, src, bytes);
}

bool stream_results(const Context& c, const CollArgs& a, size_t bytes) {
  if (bytes < c.stream_from_bytes || a.op == ReduceOp::kAvg || a.mem != nullptr) return false;
  // Their receives overwrite blocks this rank never reads, in place or not (in place, the root's
  // buffer or the rank's own block is not received at all).
  if (a.coll == Collective::kBroadcast || a.coll == Collective::kAllGather) return true;
  const size_t n = static_cast<size_t>(c.size);
  const size_t send_bytes = a.coll == Collective::kReduceScatter ? a.bytes() * n : a.bytes();
  const size_t recv_bytes = a.coll == Collective::kAllGather ? a.bytes() * n : a.bytes();
  const auto s = reinterpret_cast<uintptr_t>(a.send), r = reinterpret_cast<uintptr_t>(a.recv);
  return s + send_bytes <= r || r + recv_bytes <= s;  // no overlap: out of place
}

void copy_if_distinct(std::byte* dst, const std::byte* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
}

std::byte* Scratch::get_host(size_t slot, size_t bytes) {
  if (buffers_.size() <= slot) buffers_.resize(slot + 1);
  Buffer& b = buffers_[slot];
  if (b.bytes < bytes) {
    if (b.data != nullptr) ::munmap(b.data, b.bytes);
    b.data = nullptr;
    b.bytes = 0;
    const size_t size = std::max<size_t>(4096, (bytes + 4095) / 4096 * 4096);
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw_system_error("mmap of " + std::to_string(size) + " scratch bytes", errno);
    b.data = static_cast<std::byte*>(p);
    b.bytes = size;
  }
  return b.data;
}

Scratch::~Scratch() {
  for (auto& b : buffers_)
    if (b.data != nullptr) ::munmap(b.data, b.bytes);
}

}  // namespace chorus::algo
