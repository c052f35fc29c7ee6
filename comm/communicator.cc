// The public Communicator: argument packing and validation, then Impl::submit.
#include "chorus/communicator.h"

#include <thread>

#include "bootstrap/process_server.h"
#include "chorus/in_process_store.h"
#include "chorus/launch_env.h"
#include "chorus/log.h"
#include "communicator_impl.h"
#include "launcher_report.h"
#include "self_messages.h"
#include "validate.h"

namespace chorus {

std::string_view to_string(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kReduce:
      return "reduce";
    case Collective::kGather:
      return "gather";
    case Collective::kScatter:
      return "scatter";
    case Collective::kAllToAll:
      return "all_to_all";
    case Collective::kBarrier:
      return "barrier";
    case Collective::kSend:
      return "send";
    case Collective::kRecv:
      return "recv";
    case Collective::kSendRecv:
      return "send_recv";
  }
  return "?";
}

// ---- Work
// ----------------------------------------------------------------------------------------

void Work::wait() {
  if (!state_) return;
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::wait_for(std::chrono::milliseconds timeout) {
  if (!state_) return true;
  std::unique_lock lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done; })) return false;
  if (state_->error) std::rethrow_exception(state_->error);
  return true;
}

bool Work::test() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mu);
  return state_->done;
}

std::exception_ptr Work::error() const {
  if (!state_) return nullptr;
  std::lock_guard lock(state_->mu);
  return state_->error;
}

std::string Work::algorithm() const { return state_ ? state_->algorithm : std::string(); }

int Work::source() const {
  if (!state_) return -1;
  std::lock_guard lock(state_->mu);
  return state_->done && !state_->error ? state_->source : -1;
}

// ---- construction
// --------------------------------------------------------------------------------

Communicator::Communicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::Communicator(int rank, int world_size, std::shared_ptr<Store> store,
                           const CommOptions& options) {
  Impl::Setup s;
  s.rank = rank;
  s.world_size = world_size;
  s.local_ranks = world_size;
  s.store = std::move(store);
  s.options = options;
  impl_ = std::make_shared<Impl>(std::move(s));
  if (impl_->probe_pending) impl_->probe_host(*this);
}

Communicator Communicator::from_env(const CommOptions& options) {
  const LaunchEnv env = detect_launch_env();
  set_log_rank(env.rank);
  Impl::Setup s;
  s.rank = env.rank;
  s.world_size = env.world_size;
  s.local_ranks = env.local_world_size;
  s.job_id = env.job_id;
  s.options = options;
  s.owns_bootstrap = true;
  std::shared_ptr<Impl> impl;
  try {
    if (env.world_size == 1 && !env.store_fd) {
      // A single process needs no rendezvous, no thread and no port.
      s.store = std::make_shared<InProcessStore>();
    } else {
      // The store's server belongs to rank 0's process and serves every communicator made here;
      // each communicator has its own client, bounded by its timeout.
      if (env.rank == 0) bootstrap::serve_for_process(env);
      s.store = std::make_shared<TcpStore>(env.master_addr, env.master_port,
                                           Impl::resolve_timeout(options));
    }
    impl = std::make_shared<Impl>(std::move(s));
  } catch (const Error& e) {
    report_failure_to_launcher(env.rank, blamed_rank(e, env.rank, env.world_size));
    throw;
  }
  CHORUS_INFO(kLogInit, "started by ", env.launcher, ": rank ", env.rank, " of ", env.world_size,
              ", master ", env.master_addr, ":", env.master_port);
  Communicator comm(std::move(impl));
  if (comm.impl_->probe_pending) {
    try {
      comm.impl_->probe_host(comm);
    } catch (const Error& e) {
      report_failure_to_launcher(env.rank, blamed_rank(e, env.rank, env.world_size));
      throw;
    }
  }
  return comm;
}

Communicator::~Communicator() = default;
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }
bool Communicator::deterministic() const { return impl_->deterministic; }
const std::string& Communicator::group_name() const { return impl_->group; }
int Communicator::world_rank(int r) const {
  CHORUS_ARG_CHECK(r >= 0 && r < impl_->size, "world_rank: rank ", r, " of ", impl_->size);
  return impl_->world_ranks[static_cast<size_t>(r)];
}

int Communicator::host_of(int r) const {
  CHORUS_ARG_CHECK(r >= 0 && r < impl_->size, "host_of: rank ", r, " of ", impl_->size);
  return impl_->host_of.empty() ? 0 : impl_->host_of[static_cast<size_t>(r)];
}

std::string_view Communicator::priced_link(BufferMemory where) const {
  if (where == BufferMemory::kDevice && impl_->device_buffers_on_ipc())
    return algo::to_string(algo::Link::kDeviceIpc);
  return algo::to_string(impl_->selection.caps.hosts > 1 ? algo::Link::kUcx
                                                         : impl_->selection.local);
}

// ---- operations
// ----------------------------------------------------------------------------------

namespace {
algo::CollArgs make(Collective coll, const void* send, void* recv, size_t count, DataType dtype,
                    ReduceOp op = ReduceOp::kSum, int root = 0) {
  algo::CollArgs a;
  a.coll = coll;
  a.send = static_cast<const std::byte*>(send);
  a.recv = static_cast<std::byte*>(recv);
  a.count = count;
  a.dtype = dtype;
  a.op = op;
  a.root = root;
  return a;
}

// Every call: validated on the caller's thread, then run or queued. A call on device buffers, or
// given a stream, is stream-ordered (on the default stream when none is given).
Work issue(const std::shared_ptr<Communicator::Impl>& impl, const algo::CollArgs& a, bool blocking,
           std::optional<gpu::Stream> stream = std::nullopt) {
  CHORUS_ARG_CHECK(impl != nullptr, "use of a moved-from Communicator");
  validate(a, impl->rank, impl->size);
  // A captured stream is refused before its pointers are looked at.
  if (stream) impl->check_stream(a, *stream);
  const MemoryPlacement where = validate_memory(a, impl->rank, impl->size);
  if (!where.device && !stream) return impl->submit(a, blocking);
  if (!stream) impl->check_stream(a, gpu::Stream{});
  return impl->submit_on_stream(a, where, stream.value_or(gpu::Stream{}));
}

algo::CollArgs make_p2p(Collective coll, const void* send, void* recv, size_t count, DataType dtype,
                        int peer, int tag = 0) {
  algo::CollArgs a = make(coll, send, recv, count, dtype);
  a.peer = peer;
  a.tag = tag;
  return a;
}

algo::CollArgs make_send_recv(const void* send, size_t send_count, int send_peer, void* recv,
                              size_t recv_count, int recv_peer, DataType dtype, int send_tag = 0,
                              int recv_tag = 0) {
  algo::CollArgs a = make(Collective::kSendRecv, send, recv, send_count, dtype);
  a.peer = send_peer;
  a.recv_count = recv_count;
  a.recv_peer = recv_peer;
  a.tag = send_tag;
  a.recv_tag = recv_tag;
  return a;
}

// A Work already complete, whose receive took a message of `source` (the self part of p2p).
Work completed_receive(int source) {
  auto state = std::make_shared<Work::State>();
  state->done = true;
  state->source = source;
  return Work(state);
}

// send, recv and send_recv: those with this rank as a peer take their self part through `self`
// (self_messages.h) once every earlier operation, and the stream of a stream-ordered call, is
// done; the rest is issued as usual. Calls between two ranks pay two comparisons.
Work issue_p2p(const std::shared_ptr<Communicator::Impl>& impl, std::unique_ptr<SelfMessages>& self,
               const algo::CollArgs& a, bool blocking,
               std::optional<gpu::Stream> stream = std::nullopt) {
  CHORUS_ARG_CHECK(impl != nullptr, "use of a moved-from Communicator");
  const bool pair = a.coll == Collective::kSendRecv;
  const bool to_self = a.coll != Collective::kRecv && a.peer == impl->rank;
  const bool from_self = a.coll != Collective::kSend && (pair ? a.recv_peer : a.peer) == impl->rank;
  if (!to_self && !from_self) return issue(impl, a, blocking, stream);

  validate(a, impl->rank, impl->size);
  if (stream) impl->check_stream(a, *stream);
  const MemoryPlacement where = validate_memory(a, impl->rank, impl->size);
  const size_t recv_bytes = (pair ? a.recv_count : a.count) * a.elem();
  if (!self) self = std::make_unique<SelfMessages>();
  // Refused before anything waits or moves. A send_recv with itself and nothing queued receives
  // its own message.
  const int recv_tag = pair ? a.recv_tag : a.tag;
  if (from_self && !(to_self && self->pending(recv_tag) == 0 && a.tag == recv_tag)) {
    self->check_take(recv_bytes, recv_tag, impl->rank, a.coll);
  } else if (from_self && a.bytes() != recv_bytes) {
    const std::string name(to_string(a.coll));
    throw InvalidArgument(detail::concat(name, ": send_recv with itself sends ", a.bytes(),
                                         " bytes but receives ", recv_bytes),
                          impl->rank, name);
  }

  impl->synchronize();
  // Like every other call, none after a failure: the self part is no exception.
  if (std::exception_ptr unusable = impl->unusable_error(to_string(a.coll), -1))
    std::rethrow_exception(unusable);
  const gpu::Stream s = stream.value_or(gpu::Stream{});
  if ((where.device || stream) && gpu::probe_devices().count > 0) gpu::stream_synchronize(s);
  if (to_self) self->post(a.send, a.bytes(), a.tag, where.device, s);
  if (from_self) self->take(a.recv, recv_bytes, recv_tag, where.device, s);
  if (!pair || (to_self && from_self)) return from_self ? completed_receive(impl->rank) : Work();
  // The other half of a send_recv goes to its peer as a plain send or receive.
  algo::CollArgs rest = a;
  if (to_self) {
    rest.coll = Collective::kRecv;
    rest.send = nullptr;
    rest.peer = a.recv_peer;
    rest.count = a.recv_count;
    rest.tag = a.recv_tag;
  } else {
    rest.coll = Collective::kSend;
    rest.recv = nullptr;
  }
  rest.recv_count = 0;
  rest.recv_peer = -1;
  rest.recv_tag = 0;
  return issue(impl, rest, blocking, stream);
}
}  // namespace

Work Communicator::all_reduce_async(const void* send, void* recv, size_t count, DataType dtype,
                                    ReduceOp op) {
  return issue(impl_, make(Collective::kAllReduce, send, recv, count, dtype, op), false);
}
Work Communicator::reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                        DataType dtype, ReduceOp op) {
  return issue(impl_, make(Collective::kReduceScatter, send, recv, recv_count, dtype, op), false);
}
Work Communicator::all_gather_async(const void* send, void* recv, size_t send_count,
                                    DataType dtype) {
  return issue(impl_, make(Collective::kAllGather, send, recv, send_count, dtype), false);
}
Work Communicator::broadcast_async(const void* send, void* recv, size_t count, DataType dtype,
                                   int root) {
  return issue(impl_, make(Collective::kBroadcast, send, recv, count, dtype, ReduceOp::kSum, root),
               false);
}
Work Communicator::reduce_async(const void* send, void* recv, size_t count, DataType dtype,
                                ReduceOp op, int root) {
  return issue(impl_, make(Collective::kReduce, send, recv, count, dtype, op, root), false);
}
Work Communicator::gather_async(const void* send, void* recv, size_t send_count, DataType dtype,
                                int root) {
  return issue(
      impl_, make(Collective::kGather, send, recv, send_count, dtype, ReduceOp::kSum, root), false);
}
Work Communicator::scatter_async(const void* send, void* recv, size_t recv_count, DataType dtype,
                                 int root) {
  return issue(impl_,
               make(Collective::kScatter, send, recv, recv_count, dtype, ReduceOp::kSum, root),
               false);
}
Work Communicator::all_to_all_async(const void* send, void* recv, size_t count, DataType dtype) {
  return issue(impl_, make(Collective::kAllToAll, send, recv, count, dtype), false);
}
Work Communicator::barrier_async() {
  return issue(impl_, make(Collective::kBarrier, nullptr, nullptr, 0, DataType::kU8), false);
}
Work Communicator::send_async(const void* send, size_t count, DataType dtype, int peer, int tag) {
  return issue_p2p(impl_, self_,
                   make_p2p(Collective::kSend, send, nullptr, count, dtype, peer, tag), false);
}
Work Communicator::recv_async(void* recv, size_t count, DataType dtype, int peer, int tag) {
  return issue_p2p(impl_, self_,
                   make_p2p(Collective::kRecv, nullptr, recv, count, dtype, peer, tag), false);
}
Work Communicator::send_recv_async(const void* send, size_t send_count, int send_peer, void* recv,
                                   size_t recv_count, int recv_peer, DataType dtype, int send_tag,
                                   int recv_tag) {
  return issue_p2p(impl_, self_,
                   make_send_recv(send, send_count, send_peer, recv, recv_count, recv_peer, dtype,
                                  send_tag, recv_tag),
                   false);
}

Work Communicator::all_reduce_async(const void* send, void* recv, size_t count, DataType dtype,
                                    ReduceOp op, gpu::Stream stream) {
  return issue(impl_, make(Collective::kAllReduce, send, recv, count, dtype, op), false, stream);
}
Work Communicator::reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                        DataType dtype, ReduceOp op, gpu::Stream stream) {
  return issue(impl_, make(Collective::kReduceScatter, send, recv, recv_count, dtype, op), false,
               stream);
}
Work Communicator::all_gather_async(const void* send, void* recv, size_t send_count, DataType dtype,
                                    gpu::Stream stream) {
  return issue(impl_, make(Collective::kAllGather, send, recv, send_count, dtype), false, stream);
}
Work Communicator::broadcast_async(const void* send, void* recv, size_t count, DataType dtype,
                                   int root, gpu::Stream stream) {
  return issue(impl_, make(Collective::kBroadcast, send, recv, count, dtype, ReduceOp::kSum, root),
               false, stream);
}
Work Communicator::reduce_async(const void* send, void* recv, size_t count, DataType dtype,
                                ReduceOp op, int root, gpu::Stream stream) {
  return issue(impl_, make(Collective::kReduce, send, recv, count, dtype, op, root), false, stream);
}
Work Communicator::gather_async(const void* send, void* recv, size_t send_count, DataType dtype,
                                int root, gpu::Stream stream) {
  return issue(impl_,
               make(Collective::kGather, send, recv, send_count, dtype, ReduceOp::kSum, root),
               false, stream);
}
Work Communicator::scatter_async(const void* send, void* recv, size_t recv_count, DataType dtype,
                                 int root, gpu::Stream stream) {
  return issue(impl_,
               make(Collective::kScatter, send, recv, recv_count, dtype, ReduceOp::kSum, root),
               false, stream);
}
Work Communicator::all_to_all_async(const void* send, void* recv, size_t count, DataType dtype,
                                    gpu::Stream stream) {
  return issue(impl_, make(Collective::kAllToAll, send, recv, count, dtype), false, stream);
}
Work Communicator::barrier_async(gpu::Stream stream) {
  return issue(impl_, make(Collective::kBarrier, nullptr, nullptr, 0, DataType::kU8), false,
               stream);
}
Work Communicator::send_async(const void* send, size_t count, DataType dtype, int peer,
                              gpu::Stream stream) {
  return issue_p2p(impl_, self_, make_p2p(Collective::kSend, send, nullptr, count, dtype, peer),
                   false, stream);
}
Work Communicator::recv_async(void* recv, size_t count, DataType dtype, int peer,
                              gpu::Stream stream) {
  return issue_p2p(impl_, self_, make_p2p(Collective::kRecv, nullptr, recv, count, dtype, peer),
                   false, stream);
}
Work Communicator::send_recv_async(const void* send, size_t send_count, int send_peer, void* recv,
                                   size_t recv_count, int recv_peer, DataType dtype,
                                   gpu::Stream stream) {
  return issue_p2p(impl_, self_,
                   make_send_recv(send, send_count, send_peer, recv, recv_count, recv_peer, dtype),
                   false, stream);
}

void Communicator::all_reduce(const void* send, void* recv, size_t count, DataType dtype,
                              ReduceOp op) {
  issue(impl_, make(Collective::kAllReduce, send, recv, count, dtype, op), true).wait();
}
void Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DataType dtype,
                                  ReduceOp op) {
  issue(impl_, make(Collective::kReduceScatter, send, recv, recv_count, dtype, op), true).wait();
}
void Communicator::all_gather(const void* send, void* recv, size_t send_count, DataType dtype) {
  issue(impl_, make(Collective::kAllGather, send, recv, send_count, dtype), true).wait();
}
void Communicator::broadcast(const void* send, void* recv, size_t count, DataType dtype, int root) {
  issue(impl_, make(Collective::kBroadcast, send, recv, count, dtype, ReduceOp::kSum, root), true)
      .wait();
}
void Communicator::reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                          int root) {
  issue(impl_, make(Collective::kReduce, send, recv, count, dtype, op, root), true).wait();
}
void Communicator::gather(const void* send, void* recv, size_t send_count, DataType dtype,
                          int root) {
  issue(impl_, make(Collective::kGather, send, recv, send_count, dtype, ReduceOp::kSum, root), true)
      .wait();
}
void Communicator::scatter(const void* send, void* recv, size_t recv_count, DataType dtype,
                           int root) {
  issue(impl_, make(Collective::kScatter, send, recv, recv_count, dtype, ReduceOp::kSum, root),
        true)
      .wait();
}
void Communicator::all_to_all(const void* send, void* recv, size_t count, DataType dtype) {
  issue(impl_, make(Collective::kAllToAll, send, recv, count, dtype), true).wait();
}
void Communicator::barrier() {
  issue(impl_, make(Collective::kBarrier, nullptr, nullptr, 0, DataType::kU8), true).wait();
}
void Communicator::send(const void* buf, size_t count, DataType dtype, int peer, int tag) {
  issue_p2p(impl_, self_, make_p2p(Collective::kSend, buf, nullptr, count, dtype, peer, tag), true)
      .wait();
}
int Communicator::recv(void* buf, size_t count, DataType dtype, int peer, int tag) {
  // A receive from any source goes through a Work, which says whose message it took.
  Work w =
      issue_p2p(impl_, self_, make_p2p(Collective::kRecv, nullptr, buf, count, dtype, peer, tag),
                peer != kAnySource);
  w.wait();
  return peer != kAnySource ? peer : w.source();
}
void Communicator::send_recv(const void* send, size_t send_count, int send_peer, void* recv,
                             size_t recv_count, int recv_peer, DataType dtype, int send_tag,
                             int recv_tag) {
  issue_p2p(impl_, self_,
            make_send_recv(send, send_count, send_peer, recv, recv_count, recv_peer, dtype,
                           send_tag, recv_tag),
            true)
      .wait();
}

// ---- typed forms' checks ------------------------------------------------------------------------

void Communicator::check_size(const char* call, const char* name, size_t have, size_t count,
                              size_t blocks) {
  if (have == count * blocks) return;
  throw InvalidArgument(
      blocks == 1 ? detail::concat(call, ": ", name, " has ", have, " elements but needs ", count)
                  : detail::concat(call, ": ", name, " has ", have, " elements but needs ",
                                   count * blocks, " (", blocks, " ranks x ", count, ")"),
      -1, call);
}

void Communicator::check_divisible(const char* call, const char* name, size_t have, size_t blocks) {
  if (have % blocks == 0) return;
  throw InvalidArgument(detail::concat(call, ": ", name, " has ", have,
                                       " elements, not a multiple of the ", blocks, " ranks"),
                        -1, call);
}

// ---- groups and algorithms
// -----------------------------------------------------------------------

std::optional<Communicator> Communicator::split(int color, int key, std::string_view name) {
  return impl_->split(color, key, name);
}

void Communicator::set_algorithm(std::string_view name) {
  if (name == "auto") {
    impl_->selection.forced.reset();
    return;
  }
  auto a = algo::parse_variant(name);
  CHORUS_ARG_CHECK(a.has_value(), "set_algorithm: unknown algorithm '", name, "' (",
                   algo::algorithm_names(), " or auto)");
  // Operations already queued keep the algorithm chosen when they were issued.
  impl_->selection.forced = a;
}

std::string Communicator::algorithm_for(Collective c, size_t bytes, BufferMemory where) const {
  const bool ipc = where == BufferMemory::kDevice && impl_->device_buffers_on_ipc();
  return std::string(algo::to_string(impl_->choose(c, bytes, ipc)));
}

std::vector<AlgorithmEstimate> Communicator::explain(Collective c, size_t bytes,
                                                     BufferMemory where) const {
  return impl_->explain(c, bytes, where == BufferMemory::kDevice && impl_->device_buffers_on_ipc());
}

std::vector<int> Communicator::ring_order() const {
  if (!impl_->ring.empty()) return impl_->ring;
  std::vector<int> order(static_cast<size_t>(impl_->size));
  for (int r = 0; r < impl_->size; ++r) order[static_cast<size_t>(r)] = r;
  return order;
}

void Communicator::synchronize() { impl_->synchronize(); }

void Communicator::register_device_memory(const void* ptr, size_t bytes) {
  impl_->register_device_memory(ptr, bytes);
}

// Every rank closes its mappings of registered memory before it enters the barrier, so none maps
// any once the barrier is done.
void Communicator::deregister_device_memory(const void* ptr) {
  impl_->forget_device_memory(ptr);
  barrier();
}

void Communicator::set_timeout(std::chrono::milliseconds timeout) {
  CHORUS_ARG_CHECK(timeout.count() >= 0, "set_timeout: timeout ", timeout.count(),
                   " ms must not be negative");
  impl_->call_timeout = clamp_timeout(timeout);
}

void Communicator::abort(std::string_view reason) { impl_->abort(std::string(reason)); }

std::string Communicator::flight_recorder_json() const {
  return impl_->recorder->json("on demand");
}

}  // namespace chorus
