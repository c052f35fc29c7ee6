// Test harness: runs a body in N real processes that connect through the real bootstrap
// (Communicator::from_env with the environment chorus-run would set, rank 0 adopting a
// listening socket made here) and the real shm transport.
//
// Each rank is a fork of the test process; gtest assertions inside the body report in that
// rank's output, and the rank's exit status carries the verdict back. The whole run has a hard
// deadline: ranks still alive then are killed and the test fails naming them, so a hang fails
// instead of blocking CI.
#pragma once

#include <sys/mman.h>

#include <chrono>
#include <functional>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "chorus/communicator.h"

namespace chorus {
class Exchange;
namespace transport {
struct Wiring;
}
}  // namespace chorus

namespace chorus::testing {

struct RunOptions {
  std::chrono::milliseconds deadline{120000};
  std::map<std::string, std::string> env;  // extra environment for every rank
  std::string job_id;                      // empty: a fresh one per run
  std::vector<int> may_fail;               // ranks whose exit status is not checked (crash tests)
  // Runs in each rank's process before run_ranks connects it (e.g. to bind it to CPUs).
  std::function<void(int rank)> before_connect;
};

// A T that the ranks of a run (forks of this process) and the test share: an anonymous shared
// mapping made before they start. T should be made of atomics.
template <class T>
class SharedBetweenRanks {
 public:
  SharedBetweenRanks() {
    void* p = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    value_ = new (p) T();
  }
  ~SharedBetweenRanks() {
    value_->~T();
    ::munmap(value_, sizeof(T));
  }
  SharedBetweenRanks(const SharedBetweenRanks&) = delete;
  SharedBetweenRanks& operator=(const SharedBetweenRanks&) = delete;
  T& operator*() const { return *value_; }
  T* operator->() const { return value_; }

 private:
  T* value_;
};

// Runs body(comm) on `world_size` ranks. Returns the job id used.
std::string run_ranks(int world_size, const std::function<void(Communicator&)>& body,
                      const RunOptions& options = {});

// Raw form: runs body(rank) in `world_size` processes with the launcher environment set but no
// Communicator made (for tests of set-up failures).
std::string run_processes(int world_size, const std::function<void(int rank)>& body,
                          const RunOptions& options = {});

// Below the Communicator: runs body(rank, wiring, exchange) in n processes connected as a
// communicator's are (the real bootstrap and shm transport; the Exchange waits as a
// communicator's would), for tests that drive the transport, the Exchange or the algorithms
// directly. options.before_connect runs first in each rank. Rank 0 serves the store and leaves
// last.
void run_wired(int n, const std::function<void(int, transport::Wiring&, Exchange&)>& body,
               const RunOptions& options = {});

}  // namespace chorus::testing
