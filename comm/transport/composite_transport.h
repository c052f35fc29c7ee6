// chorus — one Transport made of two: shm for the peers on this host, UCX for the others.
//
// Links are routed by the peer's host. Failure notices go out through both (peers on this host
// read the shm segment header, the others the store) and are checked on both.
//
// Sleeping: a rank cannot block on the shm futex and the UCX event fd at once. The Exchange says
// which peers it waits for (Waiter::sleep's `awaited`): only shm peers -> futex sleep; only UCX
// peers -> event-fd sleep; both -> event-fd sleep capped at CHORUS_UCX_MIXED_SLEEP_US, since an
// shm peer's doorbell cannot end it. The hierarchical algorithms wait for one kind at a time, so
// the cap is rarely paid.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "transport/shm/shm_transport.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_transport.h"

namespace chorus::transport {

// What a rank of a composite transport sleeps on while it waits for `awaited` (local[r]: rank r
// is an shm peer): the shm doorbell when every awaited peer is local, the UCX event fd when none
// is, the event fd with a capped sleep when both kinds are awaited (or none: nothing to go by).
enum class CompositeSleep { kDoorbell, kEvents, kEventsCapped };
CompositeSleep composite_sleep(std::span<const int> awaited, const std::vector<bool>& local);

// The transport is its own waiter (it chooses between its parts' waits) and its own peer monitor
// (it asks each part about its peers). It moves host memory, in FIFO copies as far as the
// algorithms know (the default Capabilities): its shm part still reads large messages single copy.
class CompositeTransport : public Transport, public Waiter, public PeerMonitor {
 public:
  // local[r]: rank r shares this host (shm); others go over ucx.
  CompositeTransport(std::vector<bool> local, std::unique_ptr<ShmTransport> shm,
                     std::unique_ptr<UcxTransport> ucx);

  Link& link(int peer) override { return local_[peer] ? shm_->link(peer) : ucx_->link(peer); }
  Waiter& waiter() override { return *this; }
  PeerMonitor& monitor() override { return *this; }
  uint32_t arm() override { return shm_->arm(); }
  void disarm() override { shm_->disarm(); }
  void sleep(uint32_t token, long max_ns, std::span<const int> awaited) override;
  void wake() override;

  std::string name() const override { return "shm+ucx"; }
  // Only the shm links go single copy.
  void set_single_copy(bool allowed) override { shm_->set_single_copy(allowed); }
  std::vector<int> check_peers(std::span<const int> waiting_for, const OpStamp& mine) override;
  std::string why_gone(int peer) override;
  void check_alarm() override;
  void publish_current(const OpStamp& stamp) override;
  void announce_failure(int cause_rank, std::string_view text) override;
  void abandon() override;
  void announce_exit() override;
  bool process_alive(int peer) override;
  void count_completed() override;

 private:
  PeerMonitor& of(int peer) { return local_[peer] ? shm_->monitor() : ucx_->monitor(); }

  std::vector<bool> local_;
  std::unique_ptr<ShmTransport> shm_;
  std::unique_ptr<UcxTransport> ucx_;
  long mixed_sleep_ns_;
};

}  // namespace chorus::transport
