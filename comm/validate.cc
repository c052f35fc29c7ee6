// Argument checks for every Communicator call. Each failure is an InvalidArgument that names the
// call, the argument and its value, raised on the calling thread before anything is queued, so a
// bad call never breaks the communicator or reaches a peer.
#include "validate.h"

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/error.h"
#include "chorus/gpu/runtime.h"

namespace chorus {
namespace {

using algo::CollArgs;

std::string call_name(Collective c) { return std::string(to_string(c)); }

[[noreturn]] void fail(const CollArgs& a, int rank, const std::string& message) {
  throw InvalidArgument(call_name(a.coll) + ": " + message, rank, call_name(a.coll));
}

// bytes = count * blocks * element size, or an error when that does not fit.
size_t checked_bytes(const CollArgs& a, int rank, size_t count, size_t blocks, const char* what) {
  const size_t es = dtype_size(a.dtype);
  const size_t limit = static_cast<size_t>(std::numeric_limits<ptrdiff_t>::max());
  if (count != 0 && (blocks > limit / count || count * blocks > limit / es))
    fail(a, rank,
         detail::concat(what, " = ", count, " elements of ", to_string(a.dtype),
                        (blocks > 1 ? detail::concat(" x ", blocks, " ranks") : std::string()),
                        " overflows the addressable byte range"));
  return count * blocks * es;
}

void require_buffer(const CollArgs& a, int rank, const void* p, size_t bytes, const char* name) {
  if (p == nullptr && bytes > 0)
    fail(a, rank,
         detail::concat(name, " is null but ", bytes, " bytes are to be ",
                        std::string_view(name).starts_with("recv") ? "written" : "read"));
}

bool overlap(const void* a, size_t an, const void* b, size_t bn) {
  if (an == 0 || bn == 0) return false;
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bn && y < x + an;
}

// send and recv must either be the in-place pair or not overlap at all.
void require_in_place_or_disjoint(const CollArgs& a, int rank, size_t send_bytes, size_t recv_bytes,
                                  const void* in_place_send, const char* rule) {
  if (a.send == in_place_send) return;
  if (overlap(a.send, send_bytes, a.recv, recv_bytes))
    fail(a, rank,
         detail::concat("send and recv overlap but are not the in-place pair (", rule, ")"));
}

void require_rank(const CollArgs& a, int rank, int world, int value, const char* name) {
  if (value < 0 || value >= world)
    fail(a, rank, detail::concat(name, " ", value, " is out of range [0, ", world, ")"));
}

// The collectives every rank calls alike: all_reduce, reduce_scatter, all_gather, all_to_all.
void validate_symmetric(const CollArgs& a, int rank, size_t n) {
  const size_t es = dtype_size(a.dtype);
  switch (a.coll) {
    case Collective::kAllReduce: {
      const size_t b = checked_bytes(a, rank, a.count, 1, "count");
      require_buffer(a, rank, a.send, b, "send");
      require_buffer(a, rank, a.recv, b, "recv");
      require_in_place_or_disjoint(a, rank, b, b, a.recv, "in place means send == recv");
      break;
    }
    case Collective::kReduceScatter: {
      const size_t in = checked_bytes(a, rank, a.count, n, "recv_count");
      const size_t out = a.count * es;
      require_buffer(a, rank, a.send, in, "send");
      require_buffer(a, rank, a.recv, out, "recv");
      require_in_place_or_disjoint(a, rank, in, out,
                                   a.recv == nullptr ? nullptr : a.recv - rank * out,
                                   "in place means send + rank * recv_count == recv");
      break;
    }
    case Collective::kAllGather: {
      const size_t out = checked_bytes(a, rank, a.count, n, "send_count");
      const size_t in = a.count * es;
      require_buffer(a, rank, a.send, in, "send");
      require_buffer(a, rank, a.recv, out, "recv");
      require_in_place_or_disjoint(a, rank, in, out,
                                   a.recv == nullptr ? nullptr : a.recv + rank * in,
                                   "in place means send == recv + rank * send_count");
      break;
    }
    case Collective::kAllToAll: {
      const size_t b = checked_bytes(a, rank, a.count, n, "count");
      require_buffer(a, rank, a.send, b, "send");
      require_buffer(a, rank, a.recv, b, "recv");
      if (overlap(a.send, b, a.recv, b)) fail(a, rank, "send and recv overlap (not supported)");
      break;
    }
    default:
      break;
  }
}

// The rooted collectives: broadcast, reduce, gather, scatter (the root's buffers differ).
void validate_rooted(const CollArgs& a, int rank, int world) {
  const auto n = static_cast<size_t>(world);
  const size_t es = dtype_size(a.dtype);
  switch (a.coll) {
    case Collective::kBroadcast: {
      require_rank(a, rank, world, a.root, "root");
      const size_t b = checked_bytes(a, rank, a.count, 1, "count");
      if (rank == a.root) require_buffer(a, rank, a.send, b, "send");
      require_buffer(a, rank, a.recv, b, "recv");
      if (rank == a.root)
        require_in_place_or_disjoint(a, rank, b, b, a.recv, "in place means send == recv");
      break;
    }
    case Collective::kReduce: {
      require_rank(a, rank, world, a.root, "root");
      const size_t b = checked_bytes(a, rank, a.count, 1, "count");
      require_buffer(a, rank, a.send, b, "send");
      if (rank == a.root) {
        require_buffer(a, rank, a.recv, b, "recv");
        require_in_place_or_disjoint(a, rank, b, b, a.recv, "in place means send == recv");
      }
      break;
    }
    case Collective::kGather: {
      require_rank(a, rank, world, a.root, "root");
      const size_t out = checked_bytes(a, rank, a.count, n, "send_count");
      const size_t in = a.count * es;
      require_buffer(a, rank, a.send, in, "send");
      if (rank == a.root) {
        require_buffer(a, rank, a.recv, out, "recv");
        require_in_place_or_disjoint(a, rank, in, out,
                                     a.recv == nullptr ? nullptr : a.recv + rank * in,
                                     "in place means send == recv + root * send_count");
      }
      break;
    }
    case Collective::kScatter: {
      require_rank(a, rank, world, a.root, "root");
      const size_t in = checked_bytes(a, rank, a.count, n, "recv_count");
      const size_t out = a.count * es;
      require_buffer(a, rank, a.recv, out, "recv");
      if (rank == a.root) {
        require_buffer(a, rank, a.send, in, "send");
        // In place: recv == send + root * recv_count, i.e. send == recv - root * recv_count.
        require_in_place_or_disjoint(a, rank, in, out,
                                     a.recv == nullptr ? nullptr : a.recv - rank * out,
                                     "in place means recv == send + root * recv_count");
      }
      break;
    }
    default:
      break;
  }
}

// A receive's peer: a rank, or kAnySource (any other rank; never of a one-rank group, which
// has none).
void require_source(const CollArgs& a, int rank, int world, int value, const char* name) {
  if (value == kAnySource && world > 1) return;
  if (value == kAnySource)
    fail(a, rank, detail::concat(name, " kAnySource: a group of one rank has no other rank"));
  require_rank(a, rank, world, value, name);
}

void require_tag(const CollArgs& a, int rank, int tag, const char* name) {
  if (tag < 0) fail(a, rank, detail::concat(name, " ", tag, " is negative (tags are 0 or more)"));
}

// send, recv and send_recv: the peers, the tags, and each direction's buffer.
void validate_point_to_point(const CollArgs& a, int rank, int world) {
  switch (a.coll) {
    case Collective::kSend:
    case Collective::kRecv: {
      // This rank too: communicator.cc.
      if (a.coll == Collective::kSend)
        require_rank(a, rank, world, a.peer, "peer");
      else
        require_source(a, rank, world, a.peer, "peer");
      require_tag(a, rank, a.tag, "tag");
      const size_t b = checked_bytes(a, rank, a.count, 1, "count");
      if (a.coll == Collective::kSend)
        require_buffer(a, rank, a.send, b, "send");
      else
        require_buffer(a, rank, a.recv, b, "recv");
      break;
    }
    case Collective::kSendRecv: {
      require_rank(a, rank, world, a.peer, "send_peer");
      require_source(a, rank, world, a.recv_peer, "recv_peer");
      require_tag(a, rank, a.tag, "send_tag");
      require_tag(a, rank, a.recv_tag, "recv_tag");
      const size_t sb = checked_bytes(a, rank, a.count, 1, "send_count");
      const size_t rb = checked_bytes(a, rank, a.recv_count, 1, "recv_count");
      require_buffer(a, rank, a.send, sb, "send");
      require_buffer(a, rank, a.recv, rb, "recv");
      if (overlap(a.send, sb, a.recv, rb)) fail(a, rank, "send and recv overlap");
      break;
    }
    default:
      break;
  }
}

}  // namespace

void validate(const CollArgs& a, int rank, int world) {
  if (!is_valid(a.dtype))
    fail(a, rank, detail::concat("unknown dtype ", static_cast<int>(a.dtype)));
  if (!is_valid(a.op)) fail(a, rank, detail::concat("unknown op ", static_cast<int>(a.op)));
  switch (a.coll) {
    case Collective::kAllReduce:
    case Collective::kReduceScatter:
    case Collective::kAllGather:
    case Collective::kAllToAll:
      return validate_symmetric(a, rank, static_cast<size_t>(world));
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kGather:
    case Collective::kScatter:
      return validate_rooted(a, rank, world);
    case Collective::kSend:
    case Collective::kRecv:
    case Collective::kSendRecv:
      return validate_point_to_point(a, rank, world);
    case Collective::kBarrier:
      return;
  }
}

namespace {

struct Use {
  const char* name = "";
  const void* ptr = nullptr;
  size_t bytes = 0;
};

// The buffers call `a` touches on this rank, as validate() sizes them (unused entries: null).
// A fixed array: this runs on every call, and small calls must not pay for an allocation.
using Uses = std::array<Use, 2>;
Uses buffers_used(const CollArgs& a, int rank, int world) {
  const size_t n = static_cast<size_t>(world);
  const size_t b = a.bytes();
  const bool root = rank == a.root;
  switch (a.coll) {
    case Collective::kAllReduce:
      return {{{"send", a.send, b}, {"recv", a.recv, b}}};
    case Collective::kReduceScatter:
      return {{{"send", a.send, n * b}, {"recv", a.recv, b}}};
    case Collective::kAllGather:
      return {{{"send", a.send, b}, {"recv", a.recv, n * b}}};
    case Collective::kBroadcast:
      return {{{"send", root ? a.send : nullptr, b}, {"recv", a.recv, b}}};
    case Collective::kReduce:
      return {{{"send", a.send, b}, {"recv", root ? a.recv : nullptr, b}}};
    case Collective::kGather:
      return {{{"send", a.send, b}, {"recv", root ? a.recv : nullptr, n * b}}};
    case Collective::kScatter:
      return {{{"send", root ? a.send : nullptr, n * b}, {"recv", a.recv, b}}};
    case Collective::kAllToAll:
      return {{{"send", a.send, n * b}, {"recv", a.recv, n * b}}};
    case Collective::kBarrier:
      return {};
    case Collective::kSend:
      return {{{"send", a.send, b}, {"", nullptr, 0}}};
    case Collective::kRecv:
      return {{{"recv", a.recv, b}, {"", nullptr, 0}}};
    case Collective::kSendRecv:
      return {{{"send", a.send, b}, {"recv", a.recv, a.recv_count * a.elem()}}};
  }
  return {};
}

std::string describe(const gpu::PointerInfo& info) {
  if (info.kind == gpu::MemoryKind::kHost || info.kind == gpu::MemoryKind::kPinnedHost)
    return std::string(gpu::to_string(info.kind)) + " memory";
  return detail::concat(gpu::to_string(info.kind), " memory of device ", info.device);
}

bool on_device(const gpu::PointerInfo& info) {
  return info.kind == gpu::MemoryKind::kDevice || info.kind == gpu::MemoryKind::kManaged;
}

}  // namespace

MemoryPlacement validate_memory(const CollArgs& a, int rank, int world) {
  MemoryPlacement placement;
  if (gpu::backend() == gpu::Backend::kNone) return placement;  // every pointer is host memory
  const Use* first = nullptr;
  gpu::PointerInfo first_info;
  const Uses uses = buffers_used(a, rank, world);
  for (const Use& u : uses) {
    if (u.ptr == nullptr || u.bytes == 0) continue;
    const gpu::PointerInfo info = gpu::pointer_info(u.ptr);
    if (first == nullptr) {
      first = &u;
      first_info = info;
      placement.device = on_device(info);
      placement.device_id = placement.device ? info.device : -1;
      continue;
    }
    if (on_device(info) != placement.device)
      fail(a, rank,
           detail::concat(first->name, " is ", describe(first_info), " but ", u.name, " is ",
                          describe(info),
                          "; the buffers of one call must all be host memory or all "
                          "device memory"));
    if (placement.device && info.device != placement.device_id)
      fail(a, rank,
           detail::concat(first->name, " is ", describe(first_info), " but ", u.name, " is ",
                          describe(info), "; the buffers of one call must be on one device"));
  }
  const bool any_source = (a.coll == Collective::kRecv && a.peer == kAnySource) ||
                          (a.coll == Collective::kSendRecv && a.recv_peer == kAnySource);
  if (placement.device && any_source)
    fail(a, rank, "a receive from any source (kAnySource) takes host memory only");
  return placement;
}

}  // namespace chorus
