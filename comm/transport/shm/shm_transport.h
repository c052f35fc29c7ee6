// chorus — the same-host transport over POSIX shared memory (see shm_layout.h for the format).
//
// Set-up: every rank creates its segment (/chorus-<job>-<comm>-<rank>), publishes its name, pid
// and host id through the store, maps every peer's segment, tests single-copy (CMA) access to
// each peer, and once all ranks have mapped everything unlinks its own name. From then on nothing
// is left in /dev/shm even if the job crashes; chorus-run sweeps /dev/shm/chorus-<job>-* for the
// short window before that.
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "chorus/store.h"
#include "transport/shm/shm_layout.h"
#include "transport/shm/shm_segment.h"
#include "transport/transport.h"

namespace chorus::transport {

struct ShmOptions {
  size_t slot_bytes;       // CHORUS_SHM_SLOT_BYTES
  size_t depth;            // CHORUS_SHM_DEPTH
  size_t cma_threshold;    // CHORUS_SHM_CMA_THRESHOLD: messages this large go single-copy
  bool cma;                // CHORUS_SHM_CMA
  size_t fan_slot_bytes;   // CHORUS_SHM_FAN_SLOT_BYTES
  size_t fan_depth;        // CHORUS_SHM_FAN_DEPTH
  static ShmOptions from_env();
};

class ShmLink;

class ShmTransport : public Transport {
 public:
  // Collective over the `world_size` ranks sharing `store` (already scoped to one communicator),
  // or over `members` only (ranks of this host, including `rank`, ascending; empty = all ranks):
  // in a multi-host job the other ranks are reached by another transport.
  ShmTransport(int rank, int world_size, Store& store, const std::string& segment_prefix,
               std::chrono::milliseconds timeout, const ShmOptions& options,
               std::span<const int> members = {});
  ~ShmTransport() override;

  Link& link(int peer) override;
  // Larger when every peer is read single-copy: no FIFO to keep in cache, and each chunk costs a
  // hand-shake.
  size_t preferred_chunk_bytes() const override;
  bool single_copy_anywhere() const override;
  size_t single_copy_threshold() const override { return options_.cma_threshold; }
  uint64_t forwarded_in_pass_bytes() const override { return forwarded_in_pass_; }
  uint64_t assisted_bytes() const override { return assisted_; }
  // Every rank of the communicator is on this host (no other transport beside this one).
  bool fans_out() const override { return members_.size() == static_cast<size_t>(world_size_); }
  bool fan_send_now(const void* src, size_t bytes, void* copy_to, const OpStamp& stamp) override;
  bool puts_to_all() const override { return puts_to_all_; }
  uint32_t arm_sleep() override { return header()->bell.arm(); }
  void disarm_sleep() override { header()->bell.disarm(); }
  void sleep(uint32_t token, long max_ns) override {
    // A device copy in flight ends without a peer ringing: look again soon.
    if (device_copies_ > 0) [[unlikely]]
      max_ns = std::min(max_ns, kDeviceCopyPollNs);
    header()->bell.sleep(token, max_ns);
  }
  void wake_self() override { header()->bell.wake(); }

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

  // Whether sends to `peer` may use the single-copy path (for tests and logs).
  bool single_copy_to(int peer) const;

  // Device memory through IPC (shm_device.h): possible when every rank of the communicator is on
  // this host and all publish the same GPU signature.
  bool moves_device_memory(std::string* why) const override;
  void set_device_memory(const DeviceContext* device) override;

 private:
  friend class ShmLink;
  // A stream on `device` for copying a peer's device memory into host buffers (made on first use,
  // with `device` current).
  gpu::Stream host_copy_stream(int device);

  shm::SegmentHeader* header() const { return static_cast<shm::SegmentHeader*>(own_.data()); }

  // The writer of this rank's fan buffer (shm_layout.h; Request::shared). The sends of one
  // message, one to each peer, join the message being written (fan_join), and any of them
  // writes as many pieces as the slowest reader has made room for (fan_fill). A send is done
  // once its message's last piece is published (fan_written).
  struct FanOut {
    const std::byte* src = nullptr;
    std::byte* copy_to = nullptr;  // Request::dst of the sends: the writer's own copy
    bool stream = false;
    size_t bytes = 0;
    OpStamp stamp;
    size_t written = 0;  // bytes published
    uint64_t number = 0;  // messages begun before it + 1
    int joined = 0;       // sends that joined it
  };
  void fan_join(Request& r);
  bool fan_fill();
  bool fan_written(const Request& r) const {
    return fan_.number > r.token || (fan_.number == r.token && fan_.written == fan_.bytes);
  }
  uint64_t fan_consumed(int peer) const {
    return fan_ctrl_[peer].tail.load(std::memory_order_acquire);
  }
  // Publishes a piece of `bytes` (header included, a multiple of 64) at fan_pos_, whose header
  // the caller has filled but for `seq`.
  void fan_publish(shm::SlotHeader* h, uint64_t bytes);
  // The header of the next piece of `piece` bytes (header included, a multiple of 64), after a
  // skip to the ring's start where it would not fit before the end; null while the slowest
  // reader leaves no room for it.
  shm::SlotHeader* fan_reserve(uint64_t piece);
  shm::SlotHeader* fan_at(uint64_t pos) const {
    return reinterpret_cast<shm::SlotHeader*>(fan_slots_ + pos % layout_.fan_capacity());
  }
  const shm::SegmentHeader& peer_header(int peer) const;
  void announce(PeerStatus status);

  int rank_;
  int world_size_;
  std::vector<int> members_;  // ranks this transport connects (this host), including rank_
  ShmOptions options_;
  shm::Layout layout_;
  ShmSegment own_;
  std::vector<ShmSegment> peers_;
  std::vector<std::unique_ptr<ShmLink>> links_;
  uint64_t forwarded_in_pass_ = 0;  // forwarded_in_pass_bytes(), counted by the links
  uint64_t assisted_ = 0;           // assisted_bytes(), counted by the links
  shm::FanCtrl* fan_ctrl_ = nullptr;  // in this rank's segment: each reader's position
  std::byte* fan_slots_ = nullptr;
  FanOut fan_;
  uint64_t fan_messages_ = 0;  // messages begun
  uint64_t fan_pos_ = 0;       // bytes of the fan buffer published
  uint64_t fan_min_tail_ = 0;  // the slowest reader's position, as last read
  std::vector<std::byte> staging_;  // rendezvous reduce: remote data lands here, then is reduced
  std::vector<int> pidfds_;         // per peer; -1 where pidfd_open is unavailable
  bool device_ipc_ = false;
  std::string no_device_ipc_;  // why not, when !device_ipc_
  DeviceContext device_;       // of the operation running on device memory
  bool device_op_ = false;     // an operation on device memory is running (set_device_memory)
  bool puts_to_all_ = false;   // puts_to_all(), found at set-up
  int device_copies_ = 0;      // device copies / reductions the links have queued and not seen end
  static constexpr long kDeviceCopyPollNs = 20'000;
  std::vector<std::pair<int, gpu::OwnedStream>> host_copy_streams_;
};

// The host identity ranks compare to decide whether they share memory: CHORUS_HOST_ID, else
// hostname + boot id.
std::string local_host_id();

}  // namespace chorus::transport
