// chorus — the spin-wait hint: tells the core that the thread is polling (x86 PAUSE, Arm YIELD),
// which saves power and frees the pipeline for a sibling hyperthread.
#pragma once

namespace chorus {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace chorus
