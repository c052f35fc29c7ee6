#include "c10d_store.h"

#include <chrono>
#include <exception>

#include "chorus/error.h"

namespace chorus::torch {
namespace {

// Longer than this is "never": c10d takes 0 for that, and longer ones overflow its socket
// timeouts.
constexpr Millis kNever = std::chrono::hours(24 * 365);

std::chrono::milliseconds to_c10d(Millis timeout) {
  return timeout >= kNever ? ::c10d::Store::kNoTimeout : timeout;
}

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

void C10dStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  std::lock_guard lock(mu_);
  const auto start = std::chrono::steady_clock::now();
  try {
    store_->wait(keys, to_c10d(timeout));
  } catch (const std::exception& e) {
    rethrow_as_chorus(e, key_list(keys), start, timeout);
  }
}

}  // namespace chorus::torch
