// chorus — single copy over shm: the rendezvous (the receiver reads the sender's buffer with
// process_vm_readv), the shared rendezvous copy (Request::kSenderIdle, FifoCtrl::assist: the
// waiting sender writes part of the message into the receiver's memory meanwhile) and puts.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "chorus/error.h"
#include "chorus/log.h"
#include "transport/shm/shm_cma.h"
#include "transport/shm/shm_link.h"
#include "transport/shm/shm_request.h"
#include "transport/shm/shm_slot.h"
#include "transport/shm/shm_transport.h"

namespace chorus::transport {

using shm::cma_read;
using shm::cma_write;
using shm::progress;

bool ShmLink::send_rendezvous(Request& r) {
  if (!slot_free()) return false;
  auto* h = slot_header(out_slots_, sent_);
  h->kind = shm::SlotKind::kRendezvous;
  h->bytes = 0;
  h->total = r.bytes;
  // The receiver may share the copy when this rank can write its memory (it can read it).
  progress(r).assisted = (r.facts & Request::kSenderIdle) != 0 && device_ == nullptr &&
                         r.bytes >= kAssistFromBytes &&
                         in_ctrl_->cma_ok.load(std::memory_order_acquire) != 0;
  h->offset = progress(r).assisted ? 1 : 0;
  h->addr = reinterpret_cast<uint64_t>(r.src);
  h->stamp = r.stamp;
  progress(r).token = ++rndv_sent_;
  progress(r).phase = kAwaitingAck;
  publish(h);
  peer_bell_.ring();
  return true;
}

// Reads a rendezvous message; returns false when the sender is still writing its part of it
// (the request then waits in phase kAwaitingAssist).
bool ShmLink::receive_rendezvous(Request& r, uint64_t addr, bool assisted) {
  if (r.kind == Request::Kind::kRecv && assisted && r.bytes >= kAssistFromBytes) {
    // The sender waits with nothing else to do: it writes the second half while this rank
    // reads the first, unless this rank is done first and takes it back.
    const uint64_t token = in_ctrl_->rndv_done.load(std::memory_order_relaxed) + 1;
    const size_t half = r.bytes / 2 / 4096 * 4096;
    in_ctrl_->assist_offset = half;
    in_ctrl_->assist_bytes = r.bytes - half;
    in_ctrl_->assist_addr = reinterpret_cast<uint64_t>(r.dst + half);
    in_ctrl_->assist.store(token << 2 | shm::kAssistOffered, std::memory_order_release);
    peer_bell_.ring();
    if (int err = cma_read(peer_pid_, r.dst, addr, half)) throw_copy_error(err);
    progress(r).token = token;
    progress(r).addr = addr;  // should the second half come back
    progress(r).phase = kAwaitingAssist;
    return finish_assisted(r);
  }
  if (r.kind == Request::Kind::kRecv) {
    // Several ranks often read one sender's buffer at once (a broadcast's receivers), and each
    // read pins the sender's pages one after the other: readers in step bounce every page's
    // reference count and page-table lock between cores. So each reader starts at its own
    // place, rank / world_size of the way in, and wraps round (np=4 direct broadcast in place,
    // four alternations: 256 KiB 4.05-4.72 -> 5.32-6.05 GB/s, 1 MiB 3.83-4.06 -> 3.99-5.20,
    // 4 MiB 2.43-3.51 -> 3.67-4.81; np=8 1 MiB 1.75-1.87 -> 1.99-2.21). Below 256 KiB the
    // second system call costs more than it saves (64 KiB: 4.05 -> 3.67 GB/s).
    const size_t w = static_cast<size_t>(owner_.world_size_);
    size_t from = 0;
    if (w > 2 && r.bytes >= kRotateFromBytes)
      from = r.bytes / w * static_cast<size_t>(owner_.rank_) / 4096 * 4096;
    if (from > 0)
      if (int err = cma_read(peer_pid_, r.dst + from, addr + from, r.bytes - from))
        throw_copy_error(err);
    if (int err = cma_read(peer_pid_, r.dst, addr, from > 0 ? from : r.bytes))
      throw_copy_error(err);
    return true;
  }
  // Reduce: pull a cache-sized piece, combine it while it is hot.
  if (staging_.size() < kStagingBytes) staging_.resize(kStagingBytes);
  const size_t piece = kStagingBytes / 64 * 64;
  for (size_t off = 0; off < r.bytes; off += piece) {
    const size_t n = std::min(piece, r.bytes - off);
    if (int err = cma_read(peer_pid_, staging_.data(), addr + off, n)) throw_copy_error(err);
    shm::deliver(r, off, staging_.data(), n);
  }
  return true;
}

// Sender: takes the receiver's offer for this rendezvous, if there is one, and writes that part
// of the message into the receiver's memory. A failed write hands the part back (Offered
// again; the receiver then reads it) and asks for no more.
bool ShmLink::assist(Request& r) {
  const uint64_t offered = progress(r).token << 2 | shm::kAssistOffered;
  uint64_t state = out_ctrl_->assist.load(std::memory_order_acquire);
  if (state != offered ||
      !out_ctrl_->assist.compare_exchange_strong(state, progress(r).token << 2 | shm::kAssistTaken,
                                                 std::memory_order_acq_rel))
    return false;
  const uint64_t offset = out_ctrl_->assist_offset, bytes = out_ctrl_->assist_bytes;
  CHORUS_CHECK(offset <= r.bytes && bytes <= r.bytes - offset, "rank ", peer_, " offered bytes ",
               offset, "+", bytes, " of a ", r.bytes, "-byte message");
  const int err = cma_write(peer_pid_, r.src + offset, out_ctrl_->assist_addr, bytes);
  if (err == 0) owner_.counters_.assisted_bytes += bytes;
  if (err != 0) {
    CHORUS_INFO(kLogShm, "to rank ", peer_, ": shared copy refused (", std::strerror(err),
                "); the receiver copies alone");
    progress(r).assisted = false;
  }
  out_ctrl_->assist.store(
      progress(r).token << 2 | (err == 0 ? shm::kAssistDone : shm::kAssistOffered),
      std::memory_order_release);
  peer_bell_.ring();
  return true;
}

// Receiver of an assisted rendezvous: whether the whole message is here. The part offered is
// taken back and read here if the sender has not taken it; else it is here once the sender has
// written it (Done), or is read here if the sender handed it back.
bool ShmLink::finish_assisted(Request& r) {
  uint64_t state = in_ctrl_->assist.load(std::memory_order_acquire);
  if (state == (progress(r).token << 2 | shm::kAssistOffered) &&
      in_ctrl_->assist.compare_exchange_strong(state, progress(r).token << 2 | shm::kAssistRevoked,
                                               std::memory_order_acq_rel)) {
    const uint64_t offset = in_ctrl_->assist_offset;
    if (int err = cma_read(peer_pid_, r.dst + offset, progress(r).addr + offset, r.bytes - offset))
      throw_copy_error(err);
  } else if (state != (progress(r).token << 2 | shm::kAssistDone)) {
    return false;
  }
  return true;
}

void ShmLink::put(const void* src, uint64_t remote, size_t bytes) {
  CHORUS_CHECK(owner_.capabilities().puts_to_all && device_ == nullptr, "a put to rank ", peer_,
               " where single copy is not allowed between every pair");
  if (int err = cma_write(peer_pid_, src, remote, bytes)) throw_copy_error(err, /*write=*/true);
}

// A failed single-copy read, or write (`write`): the peer's process ended (ESRCH) or its memory
// went away. A peer that failed first (e.g. because a third rank died) and then exited
// published why: that is reported, naming the rank that started it, rather than its exit.
void ShmLink::throw_copy_error(int err, bool write) const {
  shm::throw_if_failed(peer_header_, peer_);
  if (err == ESRCH)
    throw PeerFailure(
        detail::concat("rank ", peer_, " (pid ", peer_pid_, ") died while this ", "rank was ",
                       write ? "writing into its buffer" : "reading its message"),
        -1, {}, -1, peer_);
  throw Error(ErrorKind::kTransport,
              detail::concat("single-copy ", write ? "write to" : "read from", " rank ", peer_,
                             " failed: ", std::strerror(err)),
              -1, {}, -1, peer_);
}

}  // namespace chorus::transport
