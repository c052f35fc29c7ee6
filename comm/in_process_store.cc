#include "chorus/in_process_store.h"

#include "chorus/error.h"

namespace chorus {

void InProcessStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

std::string InProcessStore::get(const std::string& key, Millis timeout) {
  wait({key}, timeout);
  std::lock_guard lock(mu_);
  return data_.at(key);
}

std::optional<std::string> InProcessStore::try_get(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

int64_t InProcessStore::add(const std::string& key, int64_t delta) {
  int64_t v = 0;
  {
    std::lock_guard lock(mu_);
    auto it = data_.find(key);
    if (it != data_.end()) v = std::stoll(it->second);
    v += delta;
    data_[key] = std::to_string(v);
  }
  cv_.notify_all();
  return v;
}

bool InProcessStore::remove(const std::string& key) {
  std::lock_guard lock(mu_);
  return data_.erase(key) > 0;
}

void InProcessStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  std::unique_lock lock(mu_);
  auto all_set = [&] {
    for (const auto& k : keys)
      if (!data_.count(k)) return false;
    return true;
  };
  // Clamped: a huge timeout must not wrap the condition variable's deadline into the past.
  if (!cv_.wait_for(lock, clamp_timeout(timeout), all_set)) {
    std::string missing;
    for (const auto& k : keys)
      if (!data_.count(k)) missing += (missing.empty() ? "" : ", ") + k;
    throw Timeout("store keys not set within " + describe_timeout(timeout) + ": " + missing);
  }
}

}  // namespace chorus
