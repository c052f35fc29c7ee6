// chorus — the communicator's store scope, with set-up waits that notice a peer that cannot come.
//
// While a communicator is made, each rank waits in the store for its peers' keys (host/<p>,
// shm/<p>, shm_mapped/<p>, ucx/addr/<p>; rank 0's world_size, job and choices). Left alone, such
// a wait for a peer that is already gone lasts until the deadline. Here get() and wait() are cut
// into slices of kSlice; between slices the peers still waited for are checked:
//   - a peer that failed its own set-up has left its error under "setup_failed/<p>"
//     (report_failure): PeerFailure quoting it;
//   - a peer on this host (same host id and pid namespace) whose process has ended: PeerFailure
//     "died during set-up". Each rank publishes "proc/<rank>" (host id, pid namespace, pid and
//     start time; announce()) first thing, and the watcher holds a pidfd for it.
// A key belongs to the rank whose number ends it ("shm/3": rank 3), else to rank 0, which sets
// the communicator-wide keys. A peer on another host, or one that never got as far as announce(),
// is waited for until the deadline, as before. Slicing costs nothing when the key is there: the
// server answers a get as soon as its key is set. A slice's request waits for its reply as long
// as any store request (the store's own timeout) but not past the whole wait's deadline plus
// kReplyGrace (a DeadlineScope): when the store's host stops, the wait still ends in time, naming
// it.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "chorus/store.h"
#include "chorus/unique_fd.h"

namespace chorus {

class SetupStore : public Store {
 public:
  static constexpr Millis kSlice{100};
  static constexpr Millis kReplyGrace{500};

  // `scoped`: the communicator's scope of the store ("chorus/<comm id>/").
  SetupStore(std::shared_ptr<Store> scoped, int rank, int world_size);
  ~SetupStore() override;

  // Publishes this process ("proc/<rank>") for the peers' liveness checks.
  void announce();
  // Tells the peers that this rank's set-up failed and why ("setup_failed/<rank>"). Never throws.
  void report_failure(const std::string& what) noexcept;
  // Whether peer p has reported a failed set-up, or its process on this host has ended.
  bool peer_gone(int peer);

  void set(const std::string& key, const std::string& value) override { base_->set(key, value); }
  std::string get(const std::string& key, Millis timeout) override;
  std::optional<std::string> try_get(const std::string& key) override {
    return base_->try_get(key);
  }
  int64_t add(const std::string& key, int64_t delta) override { return base_->add(key, delta); }
  bool remove(const std::string& key) override { return base_->remove(key); }
  void wait(const std::vector<std::string>& keys, Millis timeout) override;

 private:
  struct Peer {
    enum class State { kUnknown, kWatched, kInvisible, kEnded } state = State::kUnknown;
    UniqueFd pidfd;
    pid_t pid = 0;
  };
  // Throws PeerFailure when `peer` cannot come any more (waiting for `key`).
  void check(int peer, const std::string& key);
  // The reason peer p is gone, or empty.
  std::string why_gone(int peer, const std::string& key);
  int owner_of(const std::string& key) const;

  std::shared_ptr<Store> base_;
  const int rank_;
  const int world_size_;
  std::mutex mu_;
  std::map<int, Peer> peers_;  // guarded by mu_; the peers checked so far
};

}  // namespace chorus
