// chorus — the futex system call, for the layers that sleep on a 32-bit word: the tensor thread
// team (within one process) and the comm doorbells (in shared memory, across processes).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

namespace chorus::futex {

// Who may wait on the word: threads of this process (the kernel's cheaper private futexes), or
// any process that maps it.
enum class Scope { kProcess, kShared };

// Sleeps while `word` holds `expected`, until woken or `timeout` (relative; null: none) passes.
// Returns at once when the word differs; spurious returns are possible.
inline void wait(std::atomic<uint32_t>& word, uint32_t expected, const timespec* timeout,
                 Scope scope) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word),
          scope == Scope::kProcess ? FUTEX_WAIT_PRIVATE : FUTEX_WAIT, expected, timeout, nullptr,
          0);
}

// Wakes every waiter on `word`.
inline void wake_all(std::atomic<uint32_t>& word, Scope scope) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word),
          scope == Scope::kProcess ? FUTEX_WAKE_PRIVATE : FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace chorus::futex
