#include "c10d_store.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>

#include "chorus/error.h"

namespace chorus::torch {
namespace {

using Clock = std::chrono::steady_clock;

// Longer than this is "never".
constexpr Millis kNever = std::chrono::hours(24 * 365);

constexpr Millis kFirstPoll{1};
constexpr Millis kLongestPoll{50};

std::string key_list(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "'" : ", '") + k + "'";
  return out;
}

// A c10d store reports every failure as a c10::Error: a wait that used up its time is a Timeout,
// anything sooner means the store (rank 0's server, the shared file) failed.
[[noreturn]] void rethrow_as_chorus(const std::exception& e, const std::string& what,
                                    std::chrono::steady_clock::time_point start, Millis timeout) {
  if (timeout < kNever && std::chrono::steady_clock::now() - start >= timeout)
    throw Timeout(detail::concat("the torch store did not provide ", what, " within ",
                                 std::chrono::duration<double>(timeout).count(), " s: ", e.what()));
  throw PeerFailure(detail::concat("the torch store failed on ", what, ": ", e.what()));
}

}  // namespace

C10dStore::C10dStore(c10::intrusive_ptr<::c10d::Store> store) : store_(std::move(store)) {
  CHORUS_ARG_CHECK(store_, "the torch store is null");
}

void C10dStore::set(const std::string& key, const std::string& value) {
  std::lock_guard lock(mu_);
  const auto start = std::chrono::steady_clock::now();
  try {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    rethrow_as_chorus(e, "set '" + key + "'", start, kNever);
  }
}

std::string C10dStore::get(const std::string& key, Millis timeout) {
  wait({key}, timeout);
  std::lock_guard lock(mu_);
  const auto start = std::chrono::steady_clock::now();
  try {
    const std::vector<uint8_t> v = store_->get(key);
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    rethrow_as_chorus(e, "'" + key + "'", start, kNever);
  }
}

std::optional<std::string> C10dStore::try_get(const std::string& key) {
  {
    std::lock_guard lock(mu_);
    const auto start = std::chrono::steady_clock::now();
    try {
      if (!store_->check({key})) return std::nullopt;
    } catch (const std::exception& e) {
      rethrow_as_chorus(e, "'" + key + "'", start, kNever);
    }
  }
  return get(key, kNever);
}

int64_t C10dStore::add(const std::string& key, int64_t delta) {
  std::lock_guard lock(mu_);
  const auto start = std::chrono::steady_clock::now();
  try {
    return store_->add(key, delta);
  } catch (const std::exception& e) {
    rethrow_as_chorus(e, "add to '" + key + "'", start, kNever);
  }
}

bool C10dStore::remove(const std::string& key) {
  std::lock_guard lock(mu_);
  const auto start = std::chrono::steady_clock::now();
  try {
    return store_->deleteKey(key);
  } catch (const std::exception& e) {
    rethrow_as_chorus(e, "remove '" + key + "'", start, kNever);
  }
}

bool C10dStore::wait_until(const std::vector<std::string>& keys, Clock::time_point deadline) {
  const auto start = Clock::now();
  const auto all_set = [&] {
    std::lock_guard lock(mu_);
    try {
      return store_->check(keys);
    } catch (const std::exception& e) {
      rethrow_as_chorus(e, key_list(keys), start, kNever);
    }
  };
  for (Millis poll = kFirstPoll;; poll = std::min(poll * 2, kLongestPoll)) {
    if (all_set()) return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(std::min<Clock::duration>(poll, deadline - now));
  }
}

void C10dStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  const auto deadline = timeout >= kNever ? Clock::time_point::max() : Clock::now() + timeout;
  if (!wait_until(keys, deadline))
    throw Timeout(detail::concat("the torch store did not provide ", key_list(keys), " within ",
                                 std::chrono::duration<double>(timeout).count(), " s"));
}

}  // namespace chorus::torch
