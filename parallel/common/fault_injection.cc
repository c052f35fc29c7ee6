#include "common/fault_injection.h"

#include <pthread.h>

#include <atomic>
#include <mutex>
#include <string>

#include "chorus/config.h"
#include "chorus/error.h"

namespace chorus::parallel {
namespace {
const StringKnob kFaultKnob{"CHORUS_PARALLEL_FAULT", "",
                            "tests only: inject a fault into the parallel layer to prove the "
                            "equivalence tests catch it (ddp_reduce_twice, zero_shard_shift, "
                            "zero_wrong_group, tp_head_slice, checkpoint_write, "
                            "ep_wrong_rank, ep_count_off_by_one)"};

constexpr int kUnread = -1;
// The fault this process read, or kUnread. A forked child (the tests' ranks are forks that set
// their own environment) reads again.
std::atomic<int> g_fault{kUnread};

Fault read_fault() {
  const std::string f = kFaultKnob.get();
  if (f.empty() || f == "none") return Fault::kNone;
  if (f == "ddp_reduce_twice") return Fault::kReduceTwice;
  if (f == "zero_shard_shift") return Fault::kShardShift;
  if (f == "zero_wrong_group") return Fault::kWrongGroup;
  if (f == "tp_head_slice") return Fault::kHeadSlice;
  if (f == "checkpoint_write") return Fault::kCheckpointWrite;
  if (f == "ep_wrong_rank") return Fault::kExpertWrongRank;
  if (f == "ep_count_off_by_one") return Fault::kExpertCountOffByOne;
  throw InvalidArgument(detail::concat(kFaultKnob.name(), "=", f,
                                       ": expected ddp_reduce_twice, zero_shard_shift, "
                                       "zero_wrong_group, tp_head_slice, checkpoint_write, "
                                       "ep_wrong_rank or ep_count_off_by_one"));
}
}  // namespace

Fault injected_fault() {
  const int cached = g_fault.load(std::memory_order_relaxed);
  if (cached != kUnread) return static_cast<Fault>(cached);
  static std::once_flag at_fork;
  std::call_once(at_fork, [] {
    ::pthread_atfork(nullptr, nullptr, [] { g_fault.store(kUnread, std::memory_order_relaxed); });
  });
  const Fault fault = read_fault();  // an unknown name throws, and is not remembered
  g_fault.store(static_cast<int>(fault), std::memory_order_relaxed);
  return fault;
}

}  // namespace chorus::parallel
