// chorus — what every reader of shm slots does with one: check it against the message the
// receive expects, and deliver its payload into the receive (copy or reduce, streaming stores
// when asked). Shared by the FIFO, forwarding, the rendezvous and the fan-out buffer.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "chorus/error.h"
#include "chorus/kernels/cpu.h"
#include "transport/shm/shm_layout.h"
#include "transport/shm/shm_request.h"
#include "transport/transport.h"

namespace chorus::transport::shm {

inline std::byte* payload(SlotHeader* h) { return reinterpret_cast<std::byte*>(h + 1); }
inline const std::byte* payload(const SlotHeader* h) {
  return reinterpret_cast<const std::byte*>(h + 1);
}

// Throws StampMismatch when the slot belongs to another operation, chorus::Error (kMismatch)
// when its message is not `bytes` long; `peer` sent it.
inline void check_slot(const SlotHeader* h, const OpStamp& stamp, size_t bytes, int peer) {
  if (!(h->stamp == stamp)) throw StampMismatch{peer, h->stamp, stamp};
  if (h->total != bytes)
    throw Error(ErrorKind::kMismatch, detail::concat("rank ", peer, " sent a ", h->total,
                                                     "-byte message where this "
                                                     "rank expected ",
                                                     bytes,
                                                     " bytes (the ranks called different "
                                                     "collectives, counts or types)"));
}
inline void check_slot(const SlotHeader* h, const Request& r, int peer) {
  check_slot(h, r.stamp, r.bytes, peer);
}

// Writes n result bytes to a receive's destination: streaming stores when it asked for them.
inline void store(const Request& r, std::byte* dst, const std::byte* src, size_t n) {
  if (stream_dst(r))
    kernels::copy_stream(dst, src, n);
  else
    std::memcpy(dst, src, n);
}

// Copies or reduces `n` incoming bytes that belong at `offset` of the message, with streaming
// stores when the request asked for them.
inline void deliver(Request& r, size_t offset, const std::byte* data, size_t n) {
  if (r.kind == Request::Kind::kRecv) {
    store(r, r.dst + offset, data, n);
  } else if (!stream_dst(r)) {
    kernels::reduce(r.dtype, r.op, r.dst + offset, r.local + offset, data, n / dtype_size(r.dtype));
  } else {
    kernels::reduce_stream(r.dtype, r.op, r.dst + offset, r.local + offset, data,
                           n / dtype_size(r.dtype));
  }
}

// A reduction whose result is stored elsewhere than where it is computed goes a block at a
// time, so that the computed block is still in L1 when it is stored: f(offset, bytes, elements)
// for each block of n bytes of r's type.
inline constexpr size_t kStreamBlockBytes = 16 << 10;
template <class F>
void in_blocks(const Request& r, size_t n, F&& f) {
  const size_t es = dtype_size(r.dtype);
  const size_t block = kStreamBlockBytes / es * es;
  for (size_t b = 0; b < n; b += block) {
    const size_t m = std::min(block, n - b);
    f(b, m, m / es);
  }
}

}  // namespace chorus::transport::shm
