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
    : local_(std::move(local)),
      shm_(std::move(shm)),
      ucx_(std::move(ucx)),
      mixed_sleep_ns_(static_cast<long>(kMixedSleepUs.get()) * 1000) {
  fix_capabilities({});
}

CompositeSleep composite_sleep(std::span<const int> awaited, const std::vector<bool>& local) {
  bool shm = false, ucx = false;
  for (int p : awaited) (local[p] ? shm : ucx) = true;
  if (shm && !ucx) return CompositeSleep::kDoorbell;
  return ucx && !shm ? CompositeSleep::kEvents : CompositeSleep::kEventsCapped;
}

void CompositeTransport::sleep(uint32_t token, long max_ns, std::span<const int> awaited) {
  const CompositeSleep on = composite_sleep(awaited, local_);
  if (on == CompositeSleep::kDoorbell) {
    shm_->sleep(token, max_ns, awaited);
    return;
  }
  shm_->disarm();
  // Armed last, after the Exchange's final progress pass (ucx_transport.h).
  if (!ucx_->arm_worker()) return;  // UCX events are pending: progress first
  ucx_->wait_events(on == CompositeSleep::kEventsCapped ? std::min(max_ns, mixed_sleep_ns_)
                                                        : max_ns);
}

void CompositeTransport::wake() {
  shm_->wake();
  ucx_->wake();
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
