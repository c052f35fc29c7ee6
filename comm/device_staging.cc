// Where a device call's data sits in pinned host staging memory (device_staging.h): each
// collective's layout, and the copies in and out that follow from it.
#include "device_staging.h"

namespace chorus {
namespace {

constexpr size_t kPartAlign = 64;

size_t align_up(size_t v) { return (v + kPartAlign - 1) / kPartAlign * kPartAlign; }

void copy_in(StagingPlan& p, const std::byte* src, size_t offset, size_t bytes) {
  if (bytes > 0) p.in = StagingPlan::CopyIn{src, offset, bytes};
}

void copy_out(StagingPlan& p, size_t offset, std::byte* dst, size_t bytes) {
  if (bytes > 0) p.out = StagingPlan::CopyOut{offset, dst, bytes};
}

}  // namespace

namespace {

// One of a call's buffers in the staging block: where it starts, and how many bytes are copied
// between it and the caller's device memory (0: none, e.g. a broadcast's send off the root).
struct Part {
  size_t offset = 0;
  size_t bytes = 0;
};

// The block a call needs and where its send and recv buffers sit in it (nullopt: the call has no
// such buffer on this rank): the table in device_staging.h. b = the call's bytes (c elements).
struct Layout {
  size_t block = 0;
  std::optional<Part> send, recv;
};

Layout layout_of(const algo::CollArgs& a, size_t r, size_t n, bool root) {
  const size_t b = a.bytes();
  switch (a.coll) {
    case Collective::kAllReduce:
      return {b, Part{0, b}, Part{0, b}};
    case Collective::kReduceScatter:
      return {n * b, Part{0, n * b}, Part{r * b, b}};
    case Collective::kAllGather:
      return {n * b, Part{r * b, b}, Part{0, n * b}};
    case Collective::kBroadcast:
      return {b, Part{0, root ? b : 0}, Part{0, b}};
    case Collective::kReduce:
      return {b, Part{0, b}, root ? std::optional<Part>(Part{0, b}) : std::nullopt};
    case Collective::kGather:
      if (root) return {n * b, Part{r * b, b}, Part{0, n * b}};
      return {b, Part{0, b}, std::nullopt};
    case Collective::kScatter:
      if (root) return {n * b, Part{0, n * b}, Part{r * b, b}};
      return {b, std::nullopt, Part{0, b}};
    case Collective::kAllToAll: {
      const size_t half = align_up(n * b);
      return {half + n * b, Part{0, n * b}, Part{half, n * b}};
    }
    case Collective::kBarrier:
      return {};
    case Collective::kSend:
      return {b, Part{0, b}, std::nullopt};
    case Collective::kRecv:
      return {b, std::nullopt, Part{0, b}};
    case Collective::kSendRecv: {
      const size_t second = align_up(b);
      return {second + a.recv_count * a.elem(), Part{0, b}, Part{second, a.recv_count * a.elem()}};
    }
  }
  return {};
}

}  // namespace

StagingPlan plan_staging(const algo::CollArgs& a, int rank, int world) {
  const Layout layout =
      layout_of(a, static_cast<size_t>(rank), static_cast<size_t>(world), rank == a.root);
  StagingPlan p;
  p.bytes = layout.block;
  if (layout.send) {
    p.send_offset = layout.send->offset;
    copy_in(p, a.send, layout.send->offset, layout.send->bytes);
  }
  if (layout.recv) {
    p.recv_offset = layout.recv->offset;
    copy_out(p, layout.recv->offset, a.recv, layout.recv->bytes);
  }
  return p;
}

algo::CollArgs staged_args(const algo::CollArgs& a, const StagingPlan& plan, std::byte* base) {
  algo::CollArgs s = a;
  // A 0-byte call may have no block at all: its pointers are never dereferenced.
  s.send = plan.send_offset && base ? base + *plan.send_offset : nullptr;
  s.recv = plan.recv_offset && base ? base + *plan.recv_offset : nullptr;
  return s;
}

}  // namespace chorus
