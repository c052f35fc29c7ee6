// chorus — the any-host transport over UCX (UCP tagged messages).
//
// One UCP context and worker per communicator; each rank publishes its worker address through
// the communicator's store ("ucx/addr/<rank>") and opens one endpoint per UCX peer, in peer error
// mode so that a dead or unreachable peer fails its endpoint instead of hanging it. UCX picks the
// wire itself (tcp, shm, cma here; verbs, cuda where the cluster's build has them);
// UCX_TLS / UCX_NET_DEVICES confine it.
//
// Wire format: every message is two tagged sends, a 32-byte header (the sender's OpStamp and the
// message size) and the payload, both posted at once on each side, so a message costs no extra
// round trip. Tags are (sender rank, per-direction message number, part): exact matching, so
// messages of one direction complete in order as the Link contract requires. A receive-reduce
// lands in a staging buffer and is reduced after arrival.
//
// Waiting: ucp_worker_arm + poll on the worker's event fd (plus an eventfd for wake()), never
// spinning. Failure state that shm keeps in shared memory travels through the store instead:
// a failing rank writes "ucx/status/<rank>" and bumps "ucx/alarm"; peers read them only from
// check_peers (the Exchange's ~20 ms sleep cadence), never per message. A peer whose process
// dies is noticed by UCX (its endpoint fails) and named by why_gone().
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "chorus/store.h"
#include "chorus/unique_fd.h"
#include "transport/transport.h"

namespace chorus::transport {

class UcxLink;

// The transport is its own waiter (it sleeps on the worker's event fd) and its own peer monitor
// (notices and liveness through the store, and the endpoints' errors). It moves host memory, in
// FIFO copies: the default Capabilities.
class UcxTransport : public Transport, public Waiter, public PeerMonitor {
 public:
  // Collective over the ranks in `peers` (global ranks, not including `rank`) and this rank:
  // each of them must construct a UcxTransport naming this rank among its peers. `store` is
  // scoped to the communicator.
  UcxTransport(int rank, int world_size, std::span<const int> peers, Store& store,
               std::chrono::milliseconds timeout);
  ~UcxTransport() override;
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  Link& link(int peer) override;
  Waiter& waiter() override { return *this; }
  PeerMonitor& monitor() override { return *this; }
  // The worker is armed in sleep(), after the Exchange's last progress pass: progressing an
  // armed worker consumes the events that would have signalled its event fd.
  uint32_t arm() override { return 0; }
  void disarm() override {}
  void sleep(uint32_t /*token*/, long max_ns, std::span<const int> /*awaited*/) override {
    if (arm_worker()) wait_events(max_ns);
  }
  void wake() override;
  std::string name() const override { return "ucx"; }
  std::vector<int> check_peers(std::span<const int> waiting_for, const OpStamp& mine) override;
  std::string why_gone(int peer) override;
  void check_alarm() override;
  void publish_current(const OpStamp& stamp) override {
    current_ = stamp;
    published_ = false;
  }
  void announce_failure(int cause_rank, std::string_view text) override;
  void announce_exit() override;
  bool process_alive(int peer) override;
  void count_completed() override { ++ops_done_; }
  void abandon() override;

  // For a composite transport: arm the worker's event fd (false: events are pending, do not
  // sleep), and block until a UCX event, wake() or `max_ns`.
  bool arm_worker();
  void wait_events(long max_ns);
  // Drives UCX once (called by links that wait for something).
  void progress_worker();
  // Records that the endpoint to `peer` failed (UCX's error callback).
  void endpoint_failed(int peer, ucs_status_t status);
  // The error a link throws when its endpoint failed or a request failed with `status`.
  [[noreturn]] void throw_peer_error(int peer, ucs_status_t status, const char* what) const;

  int rank() const { return rank_; }
  ucp_worker_h worker() const { return worker_; }

 private:
  struct ErrorArg {  // user data of one endpoint's error callback
    UcxTransport* transport;
    int peer;
  };
  static void on_endpoint_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  // Owns the UCX objects; its destructor closes the endpoints (flushing what was sent) and
  // releases the worker and context, also when the constructor throws half-way.
  struct Handles {
    ucp_context_h context = nullptr;
    ucp_worker_h worker = nullptr;
    std::vector<ucp_ep_h> eps;  // per global rank; null where not a UCX peer
    std::vector<ucs_status_t>* ep_status = nullptr;
    UniqueFd wake_fd;  // closed after the worker and context
    std::chrono::milliseconds close_timeout{5000};
    ~Handles();
  };
  std::string status_key(int p) const { return "ucx/status/" + std::to_string(p); }
  void read_statuses();

  int rank_;
  int world_size_;
  Store& store_;
  std::vector<int> peers_;
  std::vector<std::string> hosts_;  // per rank: host id, for messages
  // Touched by the endpoint error callback, so declared before h_ (alive while it closes).
  std::vector<ucs_status_t> ep_status_;  // per rank: UCS_OK until the endpoint fails
  std::vector<std::unique_ptr<ErrorArg>> err_args_;
  std::vector<std::string> left_;  // per rank: its "left" notice, once read
  std::vector<std::chrono::steady_clock::time_point> left_seen_;  // ... and when it was read
  std::optional<std::string> failure_;  // first published peer failure seen
  int failure_rank_ = -1;
  int64_t changes_seen_ = 0;
  OpStamp current_;
  bool published_ = false;
  uint64_t ops_done_ = 0;
  bool announced_ = false;
  Handles h_;
  ucp_worker_h worker_ = nullptr;  // == h_.worker
  int efd_ = -1;                   // the worker's event fd (owned by UCX)
  bool can_arm_ = true;            // false when a UCX transport in use has no wake-up support
  long sleep_cap_ns_ = 50'000;     // CHORUS_UCX_SLEEP_US
  std::vector<std::unique_ptr<UcxLink>> links_;  // destroyed first: they may hold requests
};

}  // namespace chorus::transport
