// chorus — the transport's watch on its peers: whether each is alive, which operation it is in,
// and the failure notices ranks publish to each other.
//
// Every rank publishes the operation it starts and, when one fails or it leaves, a notice that
// its peers read while they wait; a rank waiting for a peer that has ended learns why instead of
// waiting for its deadline. Each transport publishes where its peers look: the shm transport in
// its segment header (pidfds tell it when a process is gone), UCX through the job's store. The
// Exchange checks the peers it waits for; the Communicator announces failures and exits.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "transport/op_stamp.h"

namespace chorus::transport {

// A rank's state as its peers see it.
enum class PeerStatus : uint32_t {
  kRunning = 0,
  kLeft = 1,    // destroyed its communicator (normal end, or stopped calling)
  kFailed = 2,  // an operation failed there, or it aborted; its error text is published
};

class PeerMonitor {
 public:
  // Throws chorus::PeerFailure naming the first peer that published a failure (with its error
  // text), and StampMismatch when a peer in `waiting_for` is in a different collective of the
  // same sequence number than `mine`. Returns the peers of `waiting_for` that have ended (left the
  // communicator, or their process is gone): their last messages may still be unread, so the
  // caller progresses once more before deciding that it waits for them in vain (why_gone()).
  virtual std::vector<int> check_peers(std::span<const int> waiting_for, const OpStamp& mine) = 0;
  // "rank 3 left the communicator after 5 operations" / "rank 3 (pid 42) died ...".
  virtual std::string why_gone(int peer) = 0;
  // Cheap check at the start of every operation: throws like check_peers if any peer has
  // published a failure.
  virtual void check_alarm() = 0;
  // Publishes the collective this rank is starting (read by check_peers on other ranks).
  virtual void publish_current(const OpStamp& stamp) = 0;
  // Publishes this rank's failure (and the rank that caused it) to every peer and wakes them.
  virtual void announce_failure(int cause_rank, std::string_view text) = 0;
  // Publishes that this rank left the communicator (destroyed it).
  virtual void announce_exit() = 0;
  // False once the peer's process is known to have ended (true when it cannot be known).
  virtual bool process_alive(int peer) = 0;
  // Counts a completed operation (peers quote it when this rank stops calling).
  virtual void count_completed() = 0;

 protected:
  ~PeerMonitor() = default;
};

}  // namespace chorus::transport
