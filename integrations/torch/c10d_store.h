// chorus_torch — chorus's bootstrap Store over the c10d::Store torch hands a process group, so
// the communicator meets its peers where torch did (torchrun, env://, tcp://, file://): no second
// rendezvous and no environment of its own.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "chorus/store.h"

namespace chorus::torch {

class C10dStore final : public Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<::c10d::Store> store);

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool remove(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  // Waits until every key of `keys` is set or `deadline` passes; returns whether they all are
  // (a failing store throws). It asks check(), sleeping between the asks from 1 ms doubling to
  // 50 ms, and never calls c10d's wait() with a timeout: torch 1.13's TCPStore client gives up on
  // such a wait without telling the server, which answers it when the key comes; that late answer
  // is then read as the reply to the connection's next request, and every later request reads
  // the reply meant for the one before it (wrong answers, or a read that blocks until the
  // socket's timeout: a job that stalls in set-up whenever a peer was a slice late). Every wait
  // on a group's store goes through here (set-up, monitoredBarrier).
  bool wait_until(const std::vector<std::string>& keys,
                  std::chrono::steady_clock::time_point deadline);

 private:
  // c10d's clients are not safe for concurrent calls; chorus may make them from two threads.
  // A wait holds it for each check(), not while it sleeps.
  std::mutex mu_;
  c10::intrusive_ptr<::c10d::Store> store_;
};

}  // namespace chorus::torch
