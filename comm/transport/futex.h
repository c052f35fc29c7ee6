// chorus — waiting without burning a core: a doorbell word in shared memory plus futex.
//
// Every rank owns one Doorbell (in its shm segment). Whoever changes state that the rank may be
// waiting on (a FIFO head it reads, a FIFO tail or acknowledgement it writes into) rings it.
// A waiter spins briefly, then yields, then sleeps in FUTEX_WAIT on the bell value it sampled
// *before* re-checking its condition; ring() bumps the value before looking for sleepers, and a
// sleeper registers before comparing, so one side always sees the other (no lost wake-up).
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

  uint32_t sample() const { return value.load(std::memory_order_seq_cst); }

  void ring() {
    value.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) != 0) futex_call(&value, FUTEX_WAKE, INT_MAX, nullptr);
  }

  // Sleeps until the value differs from `seen` or `max_ns` passes (spurious returns are fine).
  void sleep(uint32_t seen, long max_ns) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (value.load(std::memory_order_seq_cst) == seen) {
      timespec ts{max_ns / 1000000000L, max_ns % 1000000000L};
      futex_call(&value, FUTEX_WAIT, seen, &ts);
    }
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
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
