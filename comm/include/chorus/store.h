// chorus — the bootstrap key-value store: every piece of wire-up information (shm segment names,
// split colours, failure notices) is exchanged through it.
//
// TcpStoreServer runs a small poll()-driven server thread (rank 0 hosts it, or the process that
// owns the listening socket); TcpStore is a client. The wire protocol is length-prefixed binary
// (see comm/bootstrap/store_protocol.h); malformed input closes that one connection, never the
// server.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chorus/timeout.h"

namespace chorus {

class Store {
 public:
  virtual ~Store() = default;
  // Sets key to value (binary-safe), waking every waiter on it.
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Returns the value of key, waiting until it is set; chorus::Timeout after `timeout`.
  virtual std::string get(const std::string& key, Millis timeout) = 0;
  // Returns the value if key is set now, without waiting.
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  // Atomically adds delta to the integer stored at key (absent = 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Removes key; returns whether it existed.
  virtual bool remove(const std::string& key) = 0;
  // Waits until every key is set; chorus::Timeout naming the missing keys after `timeout`.
  virtual void wait(const std::vector<std::string>& keys, Millis timeout) = 0;
};

class TcpStoreServer {
 public:
  // Listens on host:port (port 0 = the kernel picks one; see port()).
  TcpStoreServer(const std::string& host, int port);
  // Adopts an already listening socket (e.g. one inherited from chorus-run through
  // CHORUS_STORE_FD).
  static std::unique_ptr<TcpStoreServer> adopt(int listen_fd);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;

  struct Impl;

 private:
  explicit TcpStoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class TcpStore : public Store {
 public:
  // Connects to host:port, retrying until `timeout` (the server may start later); throws
  // chorus::PeerFailure naming the address when it cannot connect in time. `timeout` also bounds
  // every reply: set, try_get, add and remove must be answered within it, get and wait within
  // their own timeout plus it, and none after the deadline of an open chorus::DeadlineScope. A
  // reply that does not come in time means that the server is stopped or hung: that call throws
  // chorus::PeerFailure saying so, and every later call fails at once. `server_rank`: the rank
  // that serves the store, named in messages and as the errors' peer() (-1: not a rank).
  TcpStore(const std::string& host, int port, Millis timeout = default_timeout(),
           int server_rank = 0);
  ~TcpStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool remove(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A view of a store that prefixes every key (so sub-communicators and jobs share one server).
class PrefixStore : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::string& value) override {
    base_->set(prefix_ + key, value);
  }
  std::string get(const std::string& key, Millis timeout) override {
    return base_->get(prefix_ + key, timeout);
  }
  std::optional<std::string> try_get(const std::string& key) override {
    return base_->try_get(prefix_ + key);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return base_->add(prefix_ + key, delta);
  }
  bool remove(const std::string& key) override { return base_->remove(prefix_ + key); }
  void wait(const std::vector<std::string>& keys, Millis timeout) override;

 private:
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

}  // namespace chorus
