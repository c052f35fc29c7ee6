#include "device_ops.h"

#include <sched.h>

#include <algorithm>
#include <bit>
#include <thread>

#include "chorus/log.h"
#include "device_staging.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

// How long a communicator being destroyed waits for the streams that still use its memory.
constexpr auto kTeardownWait = std::chrono::seconds(10);

enum class Polled { kReady, kStopped, kTimedOut };

// Polls `ready` until it says true: a few quick polls, a few yields, then sleeps growing to 1 ms.
// Ranks share cores (a job may run more ranks than a host has CPUs), so a rank waiting for its
// device must leave them to the others soon.
template <class Ready, class Stop>
Polled poll(Ready&& ready, Stop&& stop, Clock::time_point deadline) {
  auto sleep = std::chrono::microseconds(20);
  for (int pass = 0;; ++pass) {
    if (ready()) return Polled::kReady;
    if (stop()) return Polled::kStopped;
    if (Clock::now() >= deadline) return Polled::kTimedOut;
    if (pass < 16) continue;
    if (pass < 32) {
      sched_yield();
      continue;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
  }
}

// Block sizes: powers of two up to 1 MiB, then multiples of a quarter of the power of two below
// (under 25% waste), so that growing calls reuse blocks instead of allocating per size.
size_t size_class(size_t bytes) {
  if (bytes == 0) return 0;
  constexpr size_t kMiB = size_t{1} << 20;
  if (bytes <= kMiB) return std::max<size_t>(std::bit_ceil(bytes), 4096);
  const size_t quarter = std::bit_floor(bytes) / 4;
  return (bytes + quarter - 1) / quarter * quarter;
}

}  // namespace

DeviceOps::DeviceOps(int device, int rank, size_t staging_limit, GpuPath path)
    : device_(device), rank_(rank), limit_(staging_limit), path_(path) {
  gpu::DeviceGuard guard(device_);
  flag_ = gpu::PinnedHostBuffer(64, /*mapped=*/true);  // its own cache line
  store_flag(0);
  if (path_ == GpuPath::kIpc) memory_ = std::make_unique<DeviceMemoryOps>(device_);
  CHORUS_INFO(kLogColl, "stream-ordered operations on device ", device_, ": streams wait by ",
              gpu::to_string(gpu::stream_wait_method()), ", device buffers move by ",
              path_ == GpuPath::kIpc ? "IPC" : "pinned-host staging", ", staging in flight up to ",
              staging_limit >> 20, " MiB");
}

DeviceOps::~DeviceOps() {
  try {
    gpu::DeviceGuard guard(device_);
    std::lock_guard lock(mu_);
    // Operations prepared but never run (their call failed after preparing) wait no longer.
    released_ = std::max(released_, issued_);
    store_flag(released_);
    // Free nothing a stream may still touch: every block's `done` must have completed.
    const auto deadline = Clock::now() + kTeardownWait;
    bool idle = true;
    for (const std::unique_ptr<StagingSlot>& s : slots_) {
      if (s->state == StagingSlot::State::kFree) continue;
      if (s->state == StagingSlot::State::kLost) {
        idle = false;
        continue;
      }
      const Polled p = poll([&] { return s->done.query(); }, [] { return false; }, deadline);
      if (p != Polled::kReady) idle = false;
    }
    if (idle) return;
    CHORUS_WARN(kLogColl, "rank ", rank_,
                ": a stream still uses this communicator's staging "
                "memory ",
                std::chrono::duration_cast<std::chrono::seconds>(kTeardownWait).count(),
                " s after its last operation; leaving it allocated");
  } catch (const std::exception& e) {
    try {
      CHORUS_WARN(kLogColl, "rank ", rank_, ": releasing device streams failed (", e.what(),
                  "); leaving staging memory allocated");
    } catch (...) {
    }
  }
  // Leaving memory allocated beats a device reading or writing freed memory.
  flag_.leak();
  for (const std::unique_ptr<StagingSlot>& s : slots_)
    if (s->state != StagingSlot::State::kFree) s->block.leak();
}

void DeviceOps::store_flag(uint64_t value) noexcept {
  __atomic_store_n(static_cast<uint64_t*>(flag_.data()), value, __ATOMIC_RELEASE);
}

StagingSlot* DeviceOps::find_free(size_t bytes) {
  StagingSlot* best = nullptr;
  for (const std::unique_ptr<StagingSlot>& s : slots_) {
    if (s->state == StagingSlot::State::kFinished && s->done.query())
      s->state = StagingSlot::State::kFree;
    if (s->state != StagingSlot::State::kFree || s->block.bytes() < bytes) continue;
    if (!best || s->block.bytes() < best->block.bytes()) best = s.get();
  }
  return best;
}

StagingSlot& DeviceOps::acquire(size_t bytes, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const size_t want = size_class(bytes);
  std::unique_lock lock(mu_);
  // With mu_ held: a slot for the call, or null when it must wait for earlier operations.
  const auto try_take = [&]() -> StagingSlot* {
    if (StagingSlot* s = find_free(bytes)) return s;
    size_t allocated = 0;
    size_t held = 0;  // by operations in flight, and by lost slots
    bool busy = false;
    for (const std::unique_ptr<StagingSlot>& s : slots_) {
      allocated += s->block.bytes();
      if (s->state != StagingSlot::State::kFree) held += s->block.bytes();
      busy |=
          s->state == StagingSlot::State::kInFlight || s->state == StagingSlot::State::kFinished;
    }
    if (busy && held + want > limit_) return nullptr;
    if (!busy && allocated + want > limit_) {
      // Idle blocks too small for this call go first. Nothing of this communicator is in
      // flight, so no stream waits for this thread while the runtime frees them.
      std::erase_if(slots_, [](const auto& s) {
        return s->state == StagingSlot::State::kFree && s->block.bytes() > 0;
      });
    }
    auto slot = std::make_unique<StagingSlot>();
    slot->block = gpu::PinnedHostBuffer(want);
    slots_.push_back(std::move(slot));
    return slots_.back().get();
  };
  StagingSlot* slot = try_take();
  if (slot == nullptr) {
    // At the limit: wait for earlier operations to give blocks back.
    lock.unlock();
    const Polled p = poll(
        [&] {
          std::lock_guard l(mu_);
          slot = try_take();
          if (slot != nullptr) slot->state = StagingSlot::State::kInFlight;
          return slot != nullptr;
        },
        [] { return false; }, deadline);
    lock.lock();
    if (p == Polled::kTimedOut)
      throw Timeout(
          detail::concat("no staging memory for ", bytes, " bytes within ", timeout.count(),
                         " ms: earlier device operations still hold "
                         "CHORUS_GPU_STAGING_BYTES=",
                         limit_, " bytes"),
          rank_);
  }
  slot->state = StagingSlot::State::kInFlight;
  return *slot;
}

DeviceOp DeviceOps::prepare(const algo::CollArgs& a, bool device_memory, gpu::Stream stream,
                            int rank, int world, std::chrono::milliseconds timeout) {
  gpu::DeviceGuard guard(device_);
  const bool ipc = device_memory && path_ == GpuPath::kIpc;
  const bool staged = device_memory && !ipc;
  const StagingPlan plan = staged ? plan_staging(a, rank, world) : StagingPlan{};
  StagingSlot& slot = acquire(plan.bytes, timeout);
  auto* base = static_cast<std::byte*>(slot.block.data());
  DeviceOp op;
  op.seq = ++issued_;
  op.slot = &slot;
  op.args = staged ? staged_args(a, plan, base) : a;
  op.device_memory = ipc;
  if (ipc) op.args.mem = memory_.get();
  bool queued_any = false;
  try {
    if (plan.in) gpu::memcpy_async(base + plan.in->offset, plan.in->src, plan.in->bytes, stream);
    queued_any = plan.in.has_value();
    slot.staged.record(stream);
    queued_any = true;
    gpu::stream_wait_value(stream, flag_.device_pointer(), op.seq);
    if (plan.out)
      gpu::memcpy_async(plan.out->dst, base + plan.out->offset, plan.out->bytes, stream);
    slot.done.record(stream);
  } catch (...) {
    // Whatever was queued may still run: its block stays out of use until a `done` recorded
    // behind it completes (or for good, when even that cannot be queued). The sequence number
    // is released with its successor.
    StagingSlot::State state = StagingSlot::State::kFree;
    if (queued_any) {
      try {
        slot.done.record(stream);
        state = StagingSlot::State::kFinished;
      } catch (...) {
        state = StagingSlot::State::kLost;
      }
    }
    {
      std::lock_guard lock(mu_);
      slot.state = state;
    }
    abandon(op.seq);
    throw;
  }
  return op;
}

bool DeviceOps::wait_staged(const DeviceOp& op, Clock::time_point deadline,
                            const std::function<bool()>& stop) const {
  const Polled p = poll([&] { return op.slot->staged.query(); }, stop, deadline);
  if (p == Polled::kTimedOut)
    throw Timeout(
        "the stream did not reach this operation in time: the work queued on it "
        "before the call has not finished",
        rank_);
  return p == Polled::kReady;
}

void DeviceOps::wait_done(const DeviceOp& op, Clock::time_point deadline) const {
  const Polled p = poll([&] { return op.slot->done.query(); }, [] { return false; }, deadline);
  if (p == Polled::kTimedOut)
    throw Timeout("the stream did not copy the results out in time after the operation", rank_);
}

void DeviceOps::release(const DeviceOp& op) noexcept {
  std::lock_guard lock(mu_);
  uint64_t v = std::max(op.seq, released_);
  while (abandoned_.erase(v + 1) > 0) ++v;
  released_ = v;
  store_flag(v);
}

void DeviceOps::abandon(uint64_t seq) noexcept {
  std::lock_guard lock(mu_);
  if (seq != released_ + 1) {
    // Released with its predecessor; should the set not grow, the successor's release (a larger
    // value) or the communicator's end releases it.
    try {
      abandoned_.insert(seq);
    } catch (...) {
    }
    return;
  }
  uint64_t v = seq;
  while (abandoned_.erase(v + 1) > 0) ++v;
  released_ = v;
  store_flag(v);
}

void DeviceOps::finish(DeviceOp& op) noexcept {
  if (op.slot == nullptr) return;
  std::lock_guard lock(mu_);
  op.slot->state = StagingSlot::State::kFinished;
  op.slot = nullptr;
}

}  // namespace chorus
