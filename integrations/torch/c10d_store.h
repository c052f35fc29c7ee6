// chorus_torch — chorus's bootstrap Store over the c10d::Store torch hands a process group, so
// the communicator meets its peers where torch did (torchrun, env://, tcp://, file://): no second
// rendezvous and no environment of its own.
#pragma once

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

 private:
  // c10d's clients are not safe for concurrent calls; chorus may make them from two threads.
  std::mutex mu_;
  c10::intrusive_ptr<::c10d::Store> store_;
};

}  // namespace chorus::torch
