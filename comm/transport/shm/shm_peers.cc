// chorus — what the shm transport's ranks tell each other about themselves through their
// segment headers (shm_layout.h): the collective each is in, that it failed or left, how many
// operations it completed; and whether a peer's process is still alive (pidfds).
#include <poll.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "chorus/communicator.h"
#include "chorus/error.h"
#include "transport/shm/shm_transport.h"

namespace chorus::transport {

namespace shm {
// A peer that published a failure (shm_layout.h) is reported as it said: its own error text,
// and the rank that started it.
void throw_if_failed(const SegmentHeader& h, int p) {
  if (h.status.load(std::memory_order_acquire) != static_cast<uint32_t>(PeerStatus::kFailed))
    return;
  const int cause = h.cause_rank;
  const std::string text(h.error, strnlen(h.error, sizeof h.error));
  throw PeerFailure(cause == p ? detail::concat("rank ", p, " failed: ", text)
                               : detail::concat("rank ", cause, " failed first (reported by rank ",
                                                p, "): ", text),
                    -1, {}, -1, cause);
}
}  // namespace shm

namespace {
// A consistent copy of a peer's current stamp, or nullopt while it is being written.
std::optional<OpStamp> read_current(const shm::SegmentHeader& h) {
  const uint64_t v1 = h.version.load(std::memory_order_acquire);
  if (v1 == 0 || v1 % 2 != 0) return std::nullopt;
  OpStamp s;
  std::memcpy(&s, const_cast<const OpStamp*>(&h.current), sizeof s);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (h.version.load(std::memory_order_relaxed) != v1) return std::nullopt;
  return s;
}
}  // namespace

void ShmTransport::check_alarm() {
  if (header()->alarm.load(std::memory_order_acquire) != 0) check_peers({}, OpStamp{});
}

void ShmTransport::publish_current(const OpStamp& stamp) {
  auto* h = header();
  const uint64_t v = h->version.load(std::memory_order_relaxed);
  h->version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  h->current = stamp;
  h->version.store(v + 2, std::memory_order_release);
}

std::vector<int> ShmTransport::check_peers(std::span<const int> waiting_for, const OpStamp& mine) {
  // A published failure says the most: its own error text, and which rank started it.
  for (int p : members_)
    if (p != rank_) shm::throw_if_failed(peer_header(p), p);
  // Peers this rank waits for: in another collective of the same number (both may be waiting to
  // receive, so no message shows it), or gone.
  const bool collective = static_cast<Collective>(mine.coll) != Collective::kSend;
  std::vector<int> gone;
  for (int p : waiting_for) {
    const auto& h = peer_header(p);
    if (collective) {
      const auto theirs = read_current(h);
      if (theirs && theirs->seq == mine.seq &&
          static_cast<Collective>(theirs->coll) != Collective::kSend && !(*theirs == mine))
        throw StampMismatch{p, *theirs, mine};
    }
    if (h.status.load(std::memory_order_acquire) == static_cast<uint32_t>(PeerStatus::kLeft) ||
        !process_alive(p))
      gone.push_back(p);
  }
  return gone;
}

std::string ShmTransport::why_gone(int p) {
  const auto& h = peer_header(p);
  if (h.status.load(std::memory_order_acquire) == static_cast<uint32_t>(PeerStatus::kLeft))
    return detail::concat("rank ", p, " left the communicator after ", h.ops_done.load(),
                          " operations while this rank still waits for it (did it stop calling "
                          "early, e.g. a shorter loop?)");
  return detail::concat("rank ", p, " (pid ", h.pid,
                        ") died without leaving the communicator "
                        "(crashed, was killed, or exited with it still alive) after ",
                        h.ops_done.load(), " operations");
}

void ShmTransport::announce(PeerStatus status) {
  uint32_t running = static_cast<uint32_t>(PeerStatus::kRunning);
  header()->status.compare_exchange_strong(running, static_cast<uint32_t>(status),
                                           std::memory_order_acq_rel);
  for (int p : members_) {
    if (p == rank_) continue;
    auto& h = const_cast<shm::SegmentHeader&>(peer_header(p));
    if (status == PeerStatus::kFailed) h.alarm.store(1, std::memory_order_release);
    h.bell.ring();
  }
}

// The cause and text are written before the status publishes them, and never after: peers read
// them once the status says failed. Two threads may announce at once (abort() from the
// application while the progress thread's operation fails); the status alone cannot keep the
// later one from rewriting the text after the first published it, so the writer claims first.
void ShmTransport::announce_failure(int cause_rank, std::string_view text) {
  if (announcing_.exchange(true, std::memory_order_acq_rel)) return;
  auto* h = header();
  if (h->status.load() != static_cast<uint32_t>(PeerStatus::kRunning)) return;
  h->cause_rank = cause_rank;
  const size_t n = std::min(text.size(), sizeof h->error - 1);
  std::memcpy(h->error, text.data(), n);
  h->error[n] = '\0';
  announce(PeerStatus::kFailed);
}

void ShmTransport::announce_exit() { announce(PeerStatus::kLeft); }

bool ShmTransport::process_alive(int peer) {
  if (peer == rank_ || !pidfds_[peer]) return true;
  pollfd fd{pidfds_[peer].get(), POLLIN, 0};
  return ::poll(&fd, 1, 0) == 0;
}

// Only this rank writes its count: a plain store, not a locked read-modify-write per operation.
void ShmTransport::count_completed() {
  auto& done = header()->ops_done;
  done.store(done.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

}  // namespace chorus::transport
