// chorus — waiting without burning a core: a doorbell word in shared memory plus futex
// (chorus/futex.h).
//
// Every rank owns one Doorbell (in its shm segment). Whoever changes state that the rank may be
// waiting on (a FIFO head it reads, a FIFO tail or acknowledgement it writes into) rings it.
// A waiter spins briefly, then yields, then sleeps: arm() registers it as a sleeper and samples
// the bell, the waiter checks its condition once more, and sleep() blocks in FUTEX_WAIT on the
// sampled value. ring() is a fence and one load while nobody sleeps (the common, spinning case
// costs no shared write and no system call); only when a sleeper is registered does it bump the
// value and call FUTEX_WAKE. The fences make the two sides a store-buffering pair: either the
// ringer sees the sleeper, or the sleeper's last check sees the ringer's data (no lost wake-up).
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

#include "chorus/cpu_relax.h"
#include "chorus/futex.h"

namespace chorus::transport {

struct alignas(64) Doorbell {
  std::atomic<uint32_t> value{0};
  std::atomic<uint32_t> sleepers{0};

  // Called after publishing what the owner may wait for.
  void ring() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_relaxed) != 0) wake();
  }
  // Wakes the owner whatever it is doing (abort from another thread).
  void wake() {
    value.fetch_add(1, std::memory_order_seq_cst);
    futex::wake_all(value, futex::Scope::kShared);
  }

  // Registers a sleeper; returns the token for sleep(). The caller checks its condition after
  // this and then either sleeps or disarms.
  uint32_t arm() {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return value.load(std::memory_order_acquire);
  }
  void disarm() { sleepers.fetch_sub(1, std::memory_order_release); }

  // Sleeps until rung after arm() or `max_ns` passes (spurious returns are fine); disarms.
  void sleep(uint32_t token, long max_ns) {
    timespec ts{max_ns / 1000000000L, max_ns % 1000000000L};
    futex::wait(value, token, &ts, futex::Scope::kShared);
    disarm();
  }
};

// The spin hint (chorus/cpu_relax.h), here for the waiters that spin before they ring or sleep.
using chorus::cpu_relax;

}  // namespace chorus::transport
