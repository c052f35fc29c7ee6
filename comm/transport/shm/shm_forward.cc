// chorus — forwarding over shm (Request::forward, Exchange::post_forward): a receive's result
// written into the FIFO to the next peer in the same pass that writes it to its destination.
// Called on the link the result goes out on, by the receiving link (shm_fifo.cc).
#include <algorithm>
#include <cstring>

#include "chorus/kernels/cpu.h"
#include "transport/shm/shm_link.h"
#include "transport/shm/shm_request.h"
#include "transport/shm/shm_slot.h"
#include "transport/shm/shm_transport.h"

namespace chorus::transport {

using shm::payload;
using shm::progress;
using shm::stream_dst;

// Publishes the next slot of forward `f` with n bytes of payload already written to it.
void ShmLink::publish_forward(Request& f, shm::SlotHeader* h, size_t n) {
  eager_header(h, f, n);
  progress(f).offset += n;  // started through the FIFO: the rest follows it there (send_host)
  f.done = progress(f).offset == f.bytes;
  publish(h);
}

// Sends the part of `in`'s result that was delivered without being forwarded (the FIFO to this
// peer was full then) on as forward `f`, copying it from in.dst as an eager send would.
bool ShmLink::forward_received(const Request& in, Request& f) {
  bool moved = false;
  while (progress(f).offset < progress(in).offset && slot_free()) {
    const size_t n = std::min(layout_.slot_bytes, progress(in).offset - progress(f).offset);
    auto* h = slot_header(out_slots_, sent_);
    std::memcpy(payload(h), f.src + progress(f).offset, n);
    publish_forward(f, h, n);
    moved = true;
  }
  return moved;
}

// One incoming piece of `in` (n bytes at progress(in).offset, in the other link's FIFO) written to
// its destination and, in the same pass, into this link's next slot for forward `f`. A reduction
// whose destination streams computes each line once and stores it to both (reduce_stream);
// otherwise the result is computed into the outgoing slot a block at a time and copied from
// there, still in L1, to in.dst. The caller checked slot_free().
void ShmLink::forward_piece(Request& in, Request& f, const std::byte* data, size_t n) {
  auto* h = slot_header(out_slots_, sent_);
  std::byte* to = payload(h);
  std::byte* dst = in.dst + progress(in).offset;
  if (in.kind == Request::Kind::kRecv) {
    std::memcpy(to, data, n);
    shm::store(in, dst, to, n);
  } else if (stream_dst(in)) {
    kernels::reduce_stream(in.dtype, in.op, dst, in.local + progress(in).offset, data,
                           n / dtype_size(in.dtype), to);
  } else {
    shm::in_blocks(in, n, [&](size_t b, size_t m, size_t count) {
      kernels::reduce(in.dtype, in.op, to + b, in.local + progress(in).offset + b, data + b, count);
      std::memcpy(dst + b, to + b, m);
    });
  }
  publish_forward(f, h, n);
  owner_.counters_.forwarded_in_pass_bytes += n;
}

}  // namespace chorus::transport
