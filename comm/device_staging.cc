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

StagingPlan plan_staging(const algo::CollArgs& a, int rank, int world) {
  StagingPlan p;
  const size_t n = static_cast<size_t>(world);
  const size_t r = static_cast<size_t>(rank);
  const size_t b = a.bytes();  // c elements
  const bool root = rank == a.root;
  switch (a.coll) {
    case Collective::kAllReduce:
      p.bytes = b;
      copy_in(p, a.send, 0, b);
      copy_out(p, 0, a.recv, b);
      p.send_offset = p.recv_offset = 0;
      break;
    case Collective::kReduceScatter:
      p.bytes = n * b;
      copy_in(p, a.send, 0, n * b);
      copy_out(p, r * b, a.recv, b);
      p.send_offset = 0;
      p.recv_offset = r * b;
      break;
    case Collective::kAllGather:
      p.bytes = n * b;
      copy_in(p, a.send, r * b, b);
      copy_out(p, 0, a.recv, n * b);
      p.send_offset = r * b;
      p.recv_offset = 0;
      break;
    case Collective::kBroadcast:
      p.bytes = b;
      if (root) copy_in(p, a.send, 0, b);
      copy_out(p, 0, a.recv, b);
      p.send_offset = p.recv_offset = 0;
      break;
    case Collective::kReduce:
      p.bytes = b;
      copy_in(p, a.send, 0, b);
      p.send_offset = 0;
      if (root) {
        copy_out(p, 0, a.recv, b);
        p.recv_offset = 0;
      }
      break;
    case Collective::kGather:
      if (root) {
        p.bytes = n * b;
        copy_in(p, a.send, r * b, b);
        copy_out(p, 0, a.recv, n * b);
        p.send_offset = r * b;
        p.recv_offset = 0;
      } else {
        p.bytes = b;
        copy_in(p, a.send, 0, b);
        p.send_offset = 0;
      }
      break;
    case Collective::kScatter:
      if (root) {
        p.bytes = n * b;
        copy_in(p, a.send, 0, n * b);
        copy_out(p, r * b, a.recv, b);
        p.send_offset = 0;
        p.recv_offset = r * b;
      } else {
        p.bytes = b;
        copy_out(p, 0, a.recv, b);
        p.recv_offset = 0;
      }
      break;
    case Collective::kAllToAll: {
      const size_t half = align_up(n * b);
      p.bytes = half + n * b;
      copy_in(p, a.send, 0, n * b);
      copy_out(p, half, a.recv, n * b);
      p.send_offset = 0;
      p.recv_offset = half;
      break;
    }
    case Collective::kBarrier:
      break;
    case Collective::kSend:
      p.bytes = b;
      copy_in(p, a.send, 0, b);
      p.send_offset = 0;
      break;
    case Collective::kRecv:
      p.bytes = b;
      copy_out(p, 0, a.recv, b);
      p.recv_offset = 0;
      break;
    case Collective::kSendRecv: {
      const size_t rb = a.recv_count * a.elem();
      const size_t second = align_up(b);
      p.bytes = second + rb;
      copy_in(p, a.send, 0, b);
      copy_out(p, second, a.recv, rb);
      p.send_offset = 0;
      p.recv_offset = second;
      break;
    }
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
