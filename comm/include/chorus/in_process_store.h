// chorus — a Store that lives in one process (a map under a mutex): for single-process jobs and
// for communicators whose ranks are threads of one process.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "chorus/store.h"

namespace chorus {

class InProcessStore : public Store {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool remove(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> data_;
};

}  // namespace chorus
