// ProcessGroupChorus::monitoredBarrier: a barrier that names the ranks that did not arrive.
//
// torch 1.13's dist.monitored_barrier refuses every backend but gloo by name, so a plugin's is
// reached through the group itself: `group.monitored_barrier(timeout, wait_all_ranks)` (the
// default group: torch.distributed.distributed_c10d._get_default_group()). It runs through the
// group's c10d store, not chorus, so a rank that does not arrive leaves the communicator
// usable, as with gloo. Every rank but 0 checks in under a key of its own and waits for rank 0's
// verdict (up to twice the timeout); rank 0 waits for the check-ins until the timeout and names
// the ranks missing then (the first in rank order, or with wait_all_ranks all of them), raising
// chorus_torch.Timeout on every rank that waits for the verdict. Like gloo's, it orders nothing
// against calls issued before it that are still in flight. It uses the store as the communicator
// does (C10dStore: one call at a time, waits by polling).
#include <string>
#include <vector>

#include "c10d_store.h"
#include "chorus/error.h"
#include "process_group_chorus.h"

namespace chorus::torch {
namespace {

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "Rank " : "Ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

}  // namespace

void ProcessGroupChorus::monitoredBarrier(const ::c10d::BarrierOptions& opts, bool wait_all_ranks) {
  const std::string call = "monitoredBarrier";
  const std::chrono::milliseconds timeout =
      opts.timeout == ::c10d::kUnsetTimeout || opts.timeout.count() <= 0 ? timeout_ : opts.timeout;
  const std::string prefix = "chorus/monitored_barrier/" + std::to_string(monitored_barriers_++);
  const std::string verdict = prefix + "/verdict";
  const std::string in_time = "ok";
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (rank_ != 0) {
    // Rank 0's verdict comes when its own timeout ends, which started when rank 0 arrived: a
    // rank that arrived first would give up on it a moment before it is written. So the others
    // wait twice the timeout, which covers a rank 0 up to one timeout late.
    store_->set(prefix + "/" + std::to_string(rank_), "1");
    if (!store_->wait_until({verdict}, deadline + timeout))
      throw Timeout(detail::concat("rank 0 did not end the monitored barrier within ",
                                   2 * timeout.count(), " ms"),
                    rank_, call, -1, 0);
    const std::string text = store_->get(verdict, timeout);
    if (text != in_time) throw Timeout(text, rank_, call, -1, 0);
    return;
  }
  std::vector<int> missing;
  for (int r = 1; r < size_ && (missing.empty() || wait_all_ranks); ++r)
    if (!store_->wait_until({prefix + "/" + std::to_string(r)}, deadline)) missing.push_back(r);
  if (missing.empty()) {
    store_->set(verdict, in_time);
    return;
  }
  const std::string text = detail::concat(
      ranks_text(missing), " failed to pass monitoredBarrier in ", timeout.count(), " ms");
  store_->set(verdict, text);
  throw Timeout(text, rank_, call, -1, missing.front());
}

}  // namespace chorus::torch
