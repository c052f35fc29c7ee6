// chorus — the same-host transport over POSIX shared memory (see shm_layout.h for the format).
//
// Set-up: every rank creates its segment (/chorus-<job>-<comm>-<rank>), publishes its name, pid
// and host id through the store, maps every peer's segment, tests single-copy (CMA) access to
// each peer, and once all ranks have mapped everything unlinks its own name. From then on nothing
// is left in /dev/shm even if the job crashes; chorus-run sweeps /dev/shm/chorus-<job>-* for the
// short window before that.
//
// The transport's parts: set-up in shm_setup.cc, peer liveness and failure notices in
// shm_peers.cc, the links (shm_link.h) in shm_fifo.cc, shm_rendezvous.cc, shm_forward.cc,
// shm_fan.cc and shm_link_device.cc.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "chorus/store.h"
#include "chorus/unique_fd.h"
#include "transport/registered_memory.h"
#include "transport/shm/shm_fan.h"
#include "transport/shm/shm_layout.h"
#include "transport/shm/shm_segment.h"
#include "transport/transport.h"

namespace chorus::transport {

struct ShmOptions {
  size_t slot_bytes;      // CHORUS_SHM_SLOT_BYTES
  size_t depth;           // CHORUS_SHM_DEPTH
  size_t cma_threshold;   // CHORUS_SHM_CMA_THRESHOLD: messages this large go single-copy
  bool cma;               // CHORUS_SHM_CMA
  size_t fan_slot_bytes;  // CHORUS_SHM_FAN_SLOT_BYTES
  size_t fan_depth;       // CHORUS_SHM_FAN_DEPTH
  static ShmOptions from_env();
};

class ShmLink;

// The transport is its own waiter (it sleeps on this rank's doorbell, which every peer rings) and
// its own peer monitor (the peers' segment headers, and a pidfd per peer).
class ShmTransport : public Transport, public Waiter, public PeerMonitor {
 public:
  // Collective over the `world_size` ranks sharing `store` (already scoped to one communicator),
  // or over `members` only (ranks of this host, including `rank`, ascending; empty = all ranks):
  // in a multi-host job the other ranks are reached by another transport.
  ShmTransport(int rank, int world_size, Store& store, const std::string& segment_prefix,
               std::chrono::milliseconds timeout, const ShmOptions& options,
               std::span<const int> members = {});
  ~ShmTransport() override;  // shm_transport.cc, where ShmLink is complete

  Link& link(int peer) override;
  Waiter& waiter() override { return *this; }
  PeerMonitor& monitor() override { return *this; }
  bool fan_send_now(const void* src, size_t bytes, void* copy_to, const OpStamp& stamp) override;
  uint32_t arm() override { return header()->bell.arm(); }
  void disarm() override { header()->bell.disarm(); }
  void sleep(uint32_t token, long max_ns, std::span<const int> /*awaited*/) override {
    // A device copy in flight ends without a peer ringing: look again soon.
    if (device_copies_ > 0) [[unlikely]]
      max_ns = std::min(max_ns, kDeviceCopyPollNs);
    header()->bell.sleep(token, max_ns);
  }
  void wake() override { header()->bell.wake(); }

  std::string name() const override { return "shm"; }
  std::vector<int> check_peers(std::span<const int> waiting_for, const OpStamp& mine) override;
  std::string why_gone(int peer) override;
  void check_alarm() override;
  void publish_current(const OpStamp& stamp) override;
  void announce_failure(int cause_rank, std::string_view text) override;
  void announce_exit() override;
  void count_completed() override;
  bool process_alive(int peer) override;
  void abandon() override;
  // What the links counted since the transport was made, for tests (which path a transfer took).
  struct Counters {
    // Bytes written straight into a forward's outgoing buffers as they arrived
    // (Request::forward): the one-pass path rather than sending the result after the receive.
    uint64_t forwarded_in_pass_bytes = 0;
    // Bytes this rank wrote into its receivers' memory for them (Request::kSenderIdle): how often
    // the receivers of its waited-for sends shared their copy.
    uint64_t assisted_bytes = 0;
  };
  const Counters& counters() const { return counters_; }

  // Device memory through IPC (shm_device.h): possible when every rank of the communicator is on
  // this host and all publish the same GPU signature (capabilities().moves_device_memory).
  void set_device_memory(const DeviceContext* device) override;
  void set_single_copy(bool allowed) override;
  void register_device_memory(const void* base, size_t bytes) override;
  bool deregister_device_memory(const void* base) override;

 private:
  friend class ShmLink;
  // A stream on `device` for copying a peer's device memory into host buffers (made on first use,
  // with `device` current).
  gpu::Stream host_copy_stream(int device);

  shm::SegmentHeader* header() const { return static_cast<shm::SegmentHeader*>(own_.data()); }

  const shm::SegmentHeader& peer_header(int peer) const;
  // At the transport's end (shm_device.h): closes every peer allocation this rank mapped, says so,
  // and waits (bounded) until each peer it exported device memory to has done the same; the
  // outboxes of peers that never do are leaked rather than freed.
  void close_device_memory() noexcept;
  void announce(PeerStatus status);

  // Set-up (shm_setup.cc), in this order: this rank's segment, each peer's (mapped, checked and
  // probed for single copy; returns its pid), whether device memory may move through IPC, the
  // links, and what the transport can do: whether every rank may write every other's memory, the
  // chunk size and from what size messages go single copy.
  void create_segment(const std::string& name, const std::string& segment_prefix);
  pid_t connect_peer(int peer, Store& store, std::chrono::milliseconds timeout,
                     const std::string& host);
  void decide_device_ipc();
  void make_links(const std::vector<pid_t>& pids);
  Capabilities find_capabilities() const;
  bool find_puts_to_all() const;
  // Every rank of the communicator is on this host (no other transport beside this one).
  bool every_rank_here() const { return members_.size() == static_cast<size_t>(world_size_); }

  int rank_;
  int world_size_;
  std::vector<int> members_;  // ranks this transport connects (this host), including rank_
  ShmOptions options_;
  shm::Layout layout_;
  ShmSegment own_;
  std::vector<ShmSegment> peers_;
  std::vector<std::unique_ptr<ShmLink>> links_;
  Counters counters_;               // counted by the links
  shm::FanBuffer fan_;              // this rank's shared buffer and its places in the peers'
  std::vector<std::byte> staging_;  // rendezvous reduce: remote data lands here, then is reduced
  std::vector<UniqueFd> pidfds_;    // per peer; empty where pidfd_open is unavailable
  bool device_ipc_ = false;
  std::string no_device_ipc_;  // why not, when !device_ipc_
  DeviceContext device_;       // of the operation running on device memory
  bool device_op_ = false;     // an operation on device memory is running (set_device_memory)
  int device_copies_ = 0;      // device copies / reductions the links have queued and not seen end
  static constexpr long kDeviceCopyPollNs = 20'000;
  std::vector<std::pair<int, gpu::OwnedStream>> host_copy_streams_;
  RegisteredRanges registered_;  // Communicator::register_device_memory
  bool abandoned_ = false;       // a failed operation: peers may never close their mappings
  // Claimed by the one thread that writes this rank's failure (announce_failure).
  std::atomic<bool> announcing_{false};
};

namespace shm {
// Throws the chorus::PeerFailure peer `p` published, if it published one (its segment header h).
void throw_if_failed(const SegmentHeader& h, int p);
}  // namespace shm

// The host identity ranks compare to decide whether they share memory: CHORUS_HOST_ID, else
// hostname + boot id.
std::string local_host_id();

}  // namespace chorus::transport
