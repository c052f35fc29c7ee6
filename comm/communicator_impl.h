// chorus — inside a Communicator: its store scope, transport, request engine and the executor
// that runs operations in issue order. Its definitions are in three files: set-up and teardown
// (communicator_setup.cc), the executor (communicator_executor.cc) and the selection
// (communicator_selection.cc, over algo/selector.h).
//
// Execution model: every operation gets a sequence number when it is issued. Async calls queue
// it for the communicator's progress thread (started on first use); a blocking call issued while
// nothing is queued or running executes directly on the caller's thread (no hand-off latency).
// Either way exactly one operation runs at a time, in issue order. An error while running breaks
// the communicator: the failing Work carries the error and every later call fails fast with it.
#pragma once

#include <array>
#include <atomic>
#include <bitset>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "algo/algorithm.h"
#include "algo/cost_model.h"
#include "algo/registry.h"
#include "algo/selector.h"
#include "algo/tuner.h"
#include "chorus/communicator.h"
#include "chorus/launch_env.h"
#include "chorus/store.h"
#include "device_ops.h"
#include "exchange.h"
#include "flight_recorder.h"
#include "host_probe.h"
#include "setup_store.h"
#include "transport/registered_memory.h"
#include "transport/transport.h"
#include "validate.h"

namespace chorus {

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::string algorithm;
  int source = -1;  // Work::source(): set before complete()

  void complete(std::exception_ptr e);
};

struct Communicator::Impl {
  struct Setup {
    int rank = 0;
    int world_size = 1;
    int local_ranks = 1;           // ranks of the whole job on this host (for the wait policy)
    std::shared_ptr<Store> store;  // unscoped: keys get "chorus/<comm id>/" here
    bool owns_bootstrap = false;   // made by from_env: says goodbye to the store (say_goodbye)
    std::string job_id;            // empty: agreed through the store
    std::string comm_id;           // empty: "w<k>" for this rank's k-th world communicator
    CommOptions options;
    std::shared_ptr<const algo::TuneTable> tune;  // null: rank 0's table, shared via the store
    // split(): the parent's cost model (null there: tuning off); unset: rank 0's, via the store.
    std::optional<std::shared_ptr<const algo::CostModel>> model;
    std::optional<bool> deterministic;  // split(): the parent's mode; empty: options, else env
    // split(): the world rank of each member (the parent's world ranks, rank order of the
    // child), the group's name, and whether failures go to the launcher as the world's do.
    std::vector<int> world_ranks;
    std::string group;
    bool reports = false;
  };

  explicit Impl(Setup setup);
  ~Impl();

  // CommOptions::timeout, else CHORUS_TIMEOUT; clamped to kNoDeadline.
  static std::chrono::milliseconds resolve_timeout(const CommOptions& options);

  // Issues an operation: validated args, a sequence number, an algorithm; runs or queues it.
  // `device`: its stream side, already queued (DeviceOps::prepare); such an operation always
  // goes to the progress thread.
  Work submit(const algo::CollArgs& args, bool blocking,
              std::optional<DeviceOp> device = std::nullopt);
  // Refuses (InvalidArgument) a stream that cannot order `args`: one being captured into a
  // graph, or any stream but the default one in a process without a device.
  void check_stream(const algo::CollArgs& args, gpu::Stream stream) const;
  // Issues a stream-ordered operation on buffers placed as `where` (validate_memory): device
  // buffers, or host buffers with a stream (check_stream passed). Checks the device, queues the
  // stream side, then submits.
  Work submit_on_stream(const algo::CollArgs& args, const MemoryPlacement& where,
                        gpu::Stream stream);
  void synchronize();
  // Communicator::register_device_memory; and deregister_device_memory's local part (it ends with
  // a barrier): waits for earlier operations, forgets the registration, closes this rank's
  // mappings of registered peer memory (communicator_device.cc).
  void register_device_memory(const void* ptr, size_t bytes);
  void forget_device_memory(const void* ptr);
  // The error an operation issued now completes with when an earlier one broke the
  // communicator ("communicator is unusable after an earlier failure (...)"), or null.
  std::exception_ptr unusable_error(std::string_view name, int64_t seq);
  // Fails the running and every later operation here, and tells the peers (they fail too).
  void abort(const std::string& reason);
  std::optional<Communicator> split(int color, int key, std::string_view name);
  // "rank 1 of tp group 0 (world rank 3)" for a group made by split(), "rank 1" for a world.
  std::string rank_name(int r) const;
  // `e` with this communicator's ranks named by rank_name(): its own rank and every "rank N"
  // in its message (a world communicator's errors are returned as they are).
  std::exception_ptr name_ranks(const Error& e, std::exception_ptr original) const;
  // The algorithm of a call (`bytes`: algo::selection_bytes): algo::choose() on `selection`,
  // remembering recent choices by size, and saying once when deterministic mode replaces a
  // forced algorithm (communicator_selection.cc).
  // `device_ipc`: the call is on device buffers that move by IPC (algo/selector.h).
  algo::Variant choose(Collective coll, size_t bytes, bool device_ipc = false) const;
  algo::Variant choose_by_size(Collective coll, size_t bytes, bool device_ipc) const;
  // Runs the probe rank 0 chose at set-up (collective: from the constructor, on every rank) and
  // chooses by the constants rank 0 fitted from then on.
  void probe_host(Communicator& self);
  // algo::explain()'s candidates, as the public AlgorithmEstimate list.
  std::vector<AlgorithmEstimate> explain(Collective coll, size_t bytes, bool device_ipc) const;
  // The path this communicator's device buffers take (choose_gpu_path on what every rank
  // agreed at set-up and CHORUS_GPU_PATH; fixed once the first device operation made
  // device_ops_). Throws InvalidArgument as choose_gpu_path(); `why` as there.
  GpuPath device_path(std::string* why = nullptr) const;
  // Whether device buffers move by IPC here: false without a device, and where device_path()
  // refuses them (their calls then fail before anything is chosen).
  bool device_buffers_on_ipc() const;

  int rank;
  int size;
  int local_ranks;
  std::shared_ptr<Store> root_store;  // unscoped (split makes children on it)
  // Scoped to this communicator ("chorus/<comm id>/"), watching peers during set-up.
  std::shared_ptr<SetupStore> store;
  std::string job_id;
  std::string comm_id;
  std::chrono::milliseconds timeout;
  // What the selector decides by (algo/selector.h): the forced algorithm (CHORUS_ALGO,
  // CommOptions::algorithm, set_algorithm()) from construction on, the rest filled from the
  // fields below at the end of set-up (make_selection()).
  algo::SelectContext selection;
  // Reductions fold in rank order (CommOptions::deterministic / CHORUS_DETERMINISTIC): only
  // algorithms that do are chosen, and they run with algo::Context::rank_order. The same on
  // every rank (agree_on_choices() checks).
  bool deterministic = false;
  std::shared_ptr<const algo::TuneTable> tune;  // rank 0's; the same on every rank
  // Rank 0's cost model; null with CHORUS_TUNE=off (fixed thresholds).
  std::optional<std::shared_ptr<const algo::CostModel>> model;
  // Rank 0 chose at set-up to probe this host (host_probe.h): the constructor runs the probe on
  // every rank once set-up is done (probe_host()), and rank 0 holds the probe lock until then.
  bool probe_pending = false;
  HostProbeLock probe_lock;
  size_t chunk_bytes;  // pipelining unit of single-copy operations (rank 0's choice)
  // The same for operations on the FIFO path (algo::Path::kFifo); rank 0's, agreed at set-up.
  size_t fifo_chunk_bytes = transport::Capabilities::kDefaultChunkBytes;
  // The size from which the "/fifo" variants differ from the plain ones: rank 0's single-copy
  // threshold when it reads some peer single-copy, else 0 (no "/fifo" variants listed). Rank 0's
  // view, so that every rank lists and chooses the same variants.
  size_t fifo_from_bytes = 0;
  // Out-of-place results from this size on are written with streaming stores
  // (CHORUS_STREAM_FROM; SIZE_MAX = never). A local choice: ranks need not agree.
  size_t stream_from_bytes = SIZE_MAX;
  bool owns_bootstrap = false;  // Setup::owns_bootstrap
  // The world rank of every rank (the identity for a world communicator), the group's name
  // ("tp group 0"; empty for a world communicator), and whether a failure is reported to the
  // launcher (comm/launcher_report.h; in world ranks).
  std::vector<int> world_ranks;
  std::string group;
  bool reports_to_launcher = false;
  std::unique_ptr<transport::Transport> transport;
  std::unique_ptr<Exchange> exchange;
  std::vector<int> host_of;  // host index of every rank (transport/factory.h)
  int hosts = 1;
  // The ring: ring[p] is the rank at position p, ring_pos[r] rank r's position
  // (algo::ring_by_locality over the ranks' places, or rank order with CHORUS_RING=rank).
  std::vector<int> ring, ring_pos;
  algo::Scratch scratch;
  transport::RegisteredRanges registered;     // register_device_memory
  std::chrono::milliseconds call_timeout{0};  // set_timeout(): overrides `timeout` when > 0
  int64_t collectives = 0;                    // issued so far: the sequence number of the next one
  int splits = 0;
  std::unique_ptr<FlightRecorder> recorder;

 private:
  struct Op {
    algo::CollArgs args;
    int64_t seq;
    algo::Variant algorithm;
    std::shared_ptr<Work::State> state;  // null when run inline by a blocking call
    transport::OpStamp stamp;
    std::chrono::milliseconds timeout;
    uint64_t record;                 // flight-recorder id
    std::optional<DeviceOp> device;  // stream-ordered: the stream side (device_ops.h)
    bool fifo_sends = false;         // algo::sends_through_fifo()
    int source = -1;                 // a receive's: the rank whose message it took
  };
  // Both return the operation's error (nullptr on success); they never throw.
  std::exception_ptr fail(Op& op, std::exception_ptr error, const Error& e);
  std::exception_ptr execute(Op& op);
  // A stream-ordered operation: waits for its stream, runs execute() on its staging block,
  // releases the stream (also on failure) and waits for the results to be copied out.
  std::exception_ptr execute_device(Op& op);
  // The exception being handled, with this rank, the operation and its number, through fail().
  std::exception_ptr fail_current(Op& op);
  void run_single_rank(const algo::CollArgs& a);
  void progress_loop();
  // The part of the constructor after the store scope exists; a failure here is reported to
  // the peers (SetupStore::report_failure).
  void set_up(Setup& s);
  void linger_after_failed_setup();
  void say_goodbye();
  void wait_for_goodbyes();
  std::string claim_world_id();
  void check_world_size();
  void agree_on_choices();
  void set_ring(const std::vector<algo::RankPlace>& places);
  void make_selection();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  // Blocking calls that find nothing queued or running skip mu_ (submit()): these three are
  // atomics for that path; queue_ and stopping_ stay under mu_.
  std::atomic<size_t> queued_{0};     // queue_.size(), readable without the lock
  std::atomic<bool> running_{false};  // an operation runs (claimed by exchange)
  bool stopping_ = false;
  std::thread thread_;
  std::exception_ptr broken_;             // guarded by mu_
  std::atomic<bool> broken_flag_{false};  // broken_ is set (checked without the lock)
  std::atomic<int> waiters_{0};           // threads in synchronize()
  std::atomic<bool> thread_idle_{false};  // the progress thread waits for work
  std::atomic<bool> aborted_{false};
  // Stream-ordered operations: made at the first one, which fixes the communicator's device.
  std::unique_ptr<DeviceOps> device_ops_;
  // Recent selector decisions (the tuner's interpolation is not free; sizes repeat).
  struct Choice {
    size_t bytes = SIZE_MAX;
    Collective coll{};
    bool device_ipc = false;
    algo::Variant algo{};
  };
  mutable std::array<Choice, 16> choices_{};
  // Forced algorithms already logged as replaced in deterministic mode, by collective and
  // algorithm (choose()).
  mutable std::bitset<256> substitutions_logged_;
};

}  // namespace chorus
