// chorus — single-copy access to a peer's memory (CMA: process_vm_readv / process_vm_writev).
//
// Used by the rendezvous read, the shared rendezvous copy, puts, and the set-up probe that finds
// whether a peer may be read at all (containers can forbid it).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace chorus::transport::shm {

// Copies `bytes` between `local` and `remote` in process `pid`: reads them into local, or with
// `write` writes local's to remote. Returns errno or 0.
inline int cma_copy(pid_t pid, void* local, uint64_t remote, size_t bytes, bool write = false) {
  size_t done = 0;
  while (done < bytes) {
    iovec l{static_cast<char*>(local) + done, bytes - done};
    iovec r{reinterpret_cast<void*>(remote + done), bytes - done};
    ssize_t n = write ? ::process_vm_writev(pid, &l, 1, &r, 1, 0)
                      : ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EFAULT;
    done += static_cast<size_t>(n);
  }
  return 0;
}
inline int cma_read(pid_t pid, void* local, uint64_t remote, size_t bytes) {
  return cma_copy(pid, local, remote, bytes);
}
inline int cma_write(pid_t pid, const void* local, uint64_t remote, size_t bytes) {
  return cma_copy(pid, const_cast<void*>(local), remote, bytes, /*write=*/true);
}

}  // namespace chorus::transport::shm
