// chorus — waiting without burning a core: a doorbell word in shared memory plus futex.
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

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

namespace chorus::transport {

inline long futex_call(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

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
    futex_call(&value, FUTEX_WAKE, INT_MAX, nullptr);
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
    futex_call(&value, FUTEX_WAIT, token, &ts);
    disarm();
  }
};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace chorus::transport
