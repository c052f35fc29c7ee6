#include "transport/composite_transport.h"

#include "chorus/config.h"

namespace chorus::transport {
namespace {
const IntKnob kMixedSleepUs{"CHORUS_UCX_MIXED_SLEEP_US", 100,
                            "longest event-fd sleep of a rank waiting for shm and UCX peers at "
                            "once (shm doorbells cannot end it)"};
}  // namespace

CompositeTransport::CompositeTransport(std::vector<bool> local, std::unique_ptr<ShmTransport> shm,
                                       std::unique_ptr<UcxTransport> ucx)
    : local_(std::move(local)), shm_(std::move(shm)), ucx_(std::move(ucx)),
      mixed_sleep_ns_(static_cast<long>(kMixedSleepUs.get()) * 1000) {}

Link& CompositeTransport::link(int peer) {
  if (local_[peer]) {
    touched_shm_ = true;
    return shm_->link(peer);
  }
  touched_ucx_ = true;
  return ucx_->link(peer);
}

uint32_t CompositeTransport::arm_sleep() {
  touched_shm_ = touched_ucx_ = false;
  return shm_->arm_sleep();
}

void CompositeTransport::disarm_sleep() { shm_->disarm_sleep(); }

void CompositeTransport::sleep(uint32_t token, long max_ns) {
  if (touched_shm_ && !touched_ucx_) {
    shm_->sleep(token, max_ns);
    return;
  }
  shm_->disarm_sleep();
  // Armed last, after the Exchange's final progress pass (ucx_transport.h).
  if (!ucx_->arm()) return;  // UCX events are pending: progress first
  // Nothing progressed at all (cannot tell what is awaited): treat as mixed.
  const bool mixed = touched_shm_ || !touched_ucx_;
  ucx_->wait_events(mixed ? std::min(max_ns, mixed_sleep_ns_) : max_ns);
}

void CompositeTransport::wake_self() {
  shm_->wake_self();
  ucx_->wake_self();
}

std::vector<int> CompositeTransport::check_peers(std::span<const int> waiting_for,
                                                 const OpStamp& mine) {
  std::vector<int> near, far;
  for (int p : waiting_for) (local_[p] ? near : far).push_back(p);
  std::vector<int> gone = shm_->check_peers(near, mine);
  for (int p : ucx_->check_peers(far, mine)) gone.push_back(p);
  return gone;
}

std::string CompositeTransport::why_gone(int peer) { return of(peer).why_gone(peer); }

void CompositeTransport::check_alarm() {
  shm_->check_alarm();
  ucx_->check_alarm();
}

void CompositeTransport::publish_current(const OpStamp& stamp) {
  shm_->publish_current(stamp);
  ucx_->publish_current(stamp);
}

void CompositeTransport::announce_failure(int cause_rank, std::string_view text) {
  shm_->announce_failure(cause_rank, text);
  ucx_->announce_failure(cause_rank, text);
}

void CompositeTransport::abandon() {
  shm_->abandon();
  ucx_->abandon();
}

void CompositeTransport::announce_exit() {
  shm_->announce_exit();
  ucx_->announce_exit();
}

bool CompositeTransport::process_alive(int peer) { return of(peer).process_alive(peer); }

void CompositeTransport::count_completed() {
  shm_->count_completed();
  ucx_->count_completed();
}

}  // namespace chorus::transport
