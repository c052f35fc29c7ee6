// A communicator's executor: issuing an operation (sequence number, algorithm, stamp, flight
// record), running it on the caller's thread or queueing it for the progress thread, and what a
// failure does (the communicator breaks, the peers are told, the flight recorder is dumped).
#include <exception>
#include <string>

#include "chorus/log.h"
#include "communicator_impl.h"
#include "launcher_report.h"

namespace chorus {

void Work::State::complete(std::exception_ptr e) {
  {
    std::lock_guard lock(mu);
    error = std::move(e);
    done = true;
  }
  cv.notify_all();
}

namespace {
bool is_point_to_point(Collective c) {
  return c == Collective::kSend || c == Collective::kRecv || c == Collective::kSendRecv;
}
bool is_reducing(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}
bool is_rooted(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather ||
         c == Collective::kScatter;
}
}  // namespace

Work Communicator::Impl::submit(const algo::CollArgs& args, bool blocking,
                                std::optional<DeviceOp> device) {
  const size_t bytes = algo::selection_bytes(args.coll, args.count, args.dtype, size);
  const bool p2p = is_point_to_point(args.coll);
  // Device buffers on the IPC path are priced on its own constants (algo/selector.h).
  const bool device_ipc = device && device->device_memory;
  Op op{args,
        collectives,
        choose(args.coll, bytes, device_ipc),
        nullptr,
        {},
        call_timeout.count() > 0 ? call_timeout : timeout,
        0,
        std::move(device)};
  op.fifo_sends =
      algo::sends_through_fifo(selection, args, rank, op.algorithm, bytes, op.device.has_value());
  // Collectives are numbered; point-to-point messages are numbered per pair by the Exchange.
  if (!p2p) ++collectives;
  op.stamp.seq = static_cast<uint64_t>(op.seq);
  op.stamp.coll = static_cast<uint8_t>(p2p ? Collective::kSend : args.coll);
  op.stamp.count = args.count;
  op.stamp.dtype = static_cast<uint8_t>(args.dtype);
  op.stamp.op = is_reducing(args.coll) ? static_cast<uint8_t>(args.op) : 0;
  op.stamp.root = is_rooted(args.coll) ? args.root : 0;
  op.stamp.algo = p2p ? 0 : static_cast<uint8_t>(static_cast<int>(op.algorithm.algo) + 1);
  FlightRecorder::Record rec;
  rec.seq = op.seq;
  rec.coll = args.coll;
  rec.count = args.count;
  rec.dtype = args.dtype;
  rec.op = args.op;
  rec.root = is_rooted(args.coll) ? args.root : p2p ? args.peer : -1;
  rec.algorithm = algo::to_string(op.algorithm);

  // Nothing ahead of it: run on the caller's thread, no handle, errors thrown directly. No lock:
  // only this thread adds to the queue (one issuing thread), and the progress thread claims
  // running_ before it takes an operation off the queue, so an empty queue here and a won claim
  // mean nothing issued earlier is still to run. Before the first queued operation there is no
  // progress thread, so nothing else claims: a plain store does.
  auto claim = [&] {
    if (!thread_.joinable()) return running_.store(true, std::memory_order_relaxed), true;
    return queued_.load(std::memory_order_seq_cst) == 0 &&
           !running_.exchange(true, std::memory_order_seq_cst);
  };
  if (blocking && !op.device && claim()) {
    op.record = recorder->issued(rec, true);
    std::exception_ptr error = execute(op);
    running_.store(false, std::memory_order_seq_cst);
    // synchronize() callers may wait for this one. (The queue stayed empty, as only this thread
    // adds to it; the second test is a safety net.)
    if (waiters_.load(std::memory_order_seq_cst) > 0 ||
        (thread_idle_.load(std::memory_order_seq_cst) &&
         queued_.load(std::memory_order_seq_cst) > 0)) {
      { std::lock_guard lock(mu_); }
      cv_.notify_all();
    }
    if (error) std::rethrow_exception(error);
    return Work();
  }
  std::unique_lock lock(mu_);
  op.state = std::make_shared<Work::State>();
  op.state->algorithm = std::string(rec.algorithm);
  op.record = recorder->issued(rec);
  Work work(op.state);
  queue_.push_back(std::move(op));
  queued_.store(queue_.size(), std::memory_order_seq_cst);
  if (!thread_.joinable()) thread_ = std::thread([this] { progress_loop(); });
  const bool notify = thread_idle_.load(std::memory_order_seq_cst);
  lock.unlock();
  if (notify) cv_.notify_all();
  return work;
}

void Communicator::Impl::progress_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    thread_idle_.store(true, std::memory_order_seq_cst);
    cv_.wait(lock, [&] {
      return (!queue_.empty() && !running_.load(std::memory_order_seq_cst)) ||
             (stopping_ && queue_.empty());
    });
    if (queue_.empty()) {  // stopping
      thread_idle_.store(false, std::memory_order_seq_cst);
      return;
    }
    // Claim before taking the operation off the queue (see submit()); a blocking call on the
    // issuing thread may have claimed first: it wakes this thread when it is done.
    if (running_.exchange(true, std::memory_order_seq_cst)) continue;
    thread_idle_.store(false, std::memory_order_seq_cst);
    Op op = std::move(queue_.front());
    queue_.pop_front();
    queued_.store(queue_.size(), std::memory_order_seq_cst);
    lock.unlock();
    recorder->started(op.record);
    std::exception_ptr error = op.device ? execute_device(op) : execute(op);
    op.state->source = op.source;
    op.state->complete(std::move(error));
    lock.lock();
    running_.store(false, std::memory_order_seq_cst);
    if (waiters_.load(std::memory_order_seq_cst) > 0) cv_.notify_all();
  }
}

void Communicator::Impl::synchronize() {
  std::unique_lock lock(mu_);
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  cv_.wait(lock, [&] { return queue_.empty() && !running_.load(std::memory_order_seq_cst); });
  waiters_.fetch_sub(1, std::memory_order_seq_cst);
}

std::exception_ptr Communicator::Impl::unusable_error(std::string_view name, int64_t seq) {
  if (!broken_flag_.load(std::memory_order_acquire)) return nullptr;
  std::exception_ptr broken;
  {
    std::lock_guard lock(mu_);
    broken = broken_;
  }
  std::string why = "an earlier operation failed";
  try {
    std::rethrow_exception(broken);
  } catch (const std::exception& e) {
    why = e.what();
  }
  return std::make_exception_ptr(Error(
      ErrorKind::kPeerFailure, "communicator is unusable after an earlier failure (" + why + ")",
      rank, std::string(name), seq));
}

std::exception_ptr Communicator::Impl::execute(Op& op) {
  const std::string_view name = to_string(op.args.coll);
  if (std::exception_ptr unusable = unusable_error(name, op.seq)) {
    recorder->finished(op.record, "not run: communicator unusable");
    return unusable;
  }
  try {
    if (size == 1) {
      run_single_rank(op.args);
    } else {
      const algo::AlgoEntry* entry = algo::find_algorithm(op.args.coll, op.algorithm.algo);
      CHORUS_CHECK(entry != nullptr, "no algorithm ", algo::to_string(op.algorithm), " for ", name);
      // The pipelining unit follows the agreed path; the sends, this rank's own.
      const bool fifo = op.algorithm.path == algo::Path::kFifo;
      exchange->begin(name.data(), op.seq, entry->description, op.timeout, op.stamp, op.fifo_sends);
      algo::Context ctx{
          rank,    size, *exchange, scratch,          fifo ? fifo_chunk_bytes : chunk_bytes,
          host_of, ring, ring_pos,  stream_from_bytes};
      ctx.rank_order = deterministic;
      entry->run(ctx, op.args);
      op.source = ctx.source;
      transport->monitor().count_completed();
    }
    recorder->finished(op.record, {});
    return nullptr;
  } catch (const Error& e) {
    // Attach this rank, the operation and its sequence number where the thrower could not.
    if (e.op().empty() || e.rank() < 0) {
      Error full(e.kind(), e.message(), rank, std::string(name), op.seq, e.peer());
      return fail(op, std::make_exception_ptr(full), full);
    }
    return fail(op, std::current_exception(), e);
  } catch (const std::exception& e) {
    Error full(ErrorKind::kInternal, e.what(), rank, std::string(name), op.seq);
    return fail(op, std::make_exception_ptr(full), full);
  }
}

// A failed operation breaks the communicator: the peers are told (with the rank that started
// it), the flight recorder is dumped, and every later operation fails fast.
std::exception_ptr Communicator::Impl::fail(Op& op, std::exception_ptr error, const Error& e) {
  // A group made by split() names its ranks with their world ranks, here and in what the peers
  // are told.
  error = name_ranks(e, error);
  std::string what;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& named) {
    what = named.what();
  }
  {
    std::lock_guard lock(mu_);
    if (!broken_) broken_ = error;
    broken_flag_.store(true, std::memory_order_release);
  }
  const int cause = e.kind() == ErrorKind::kPeerFailure && e.peer() >= 0 ? e.peer() : rank;
  if (reports_to_launcher)
    report_failure_to_launcher(world_ranks[static_cast<size_t>(rank)],
                               world_ranks[static_cast<size_t>(blamed_rank(e, rank, size))]);
  if (transport) {
    transport->monitor().announce_failure(cause, what);
    transport->abandon();
  }
  recorder->finished(op.record, what);
  if (e.kind() != ErrorKind::kInvalidArgument) {
    const std::string path = recorder->dump_to_dir(what);
    CHORUS_WARN(kLogColl, what, "\nlast operations of communicator ", comm_id,
                group.empty() ? "" : " (" + group + ")", ":\n", recorder->summary(8),
                path.empty() ? std::string("(set CHORUS_FR_DIR to keep full flight-recorder dumps)")
                             : "flight recorder: " + path);
  }
  return error;
}

void Communicator::Impl::abort(const std::string& reason) {
  const std::string text = "aborted by the application" + (reason.empty() ? "" : ": " + reason);
  {
    std::lock_guard lock(mu_);
    if (!broken_) broken_ = std::make_exception_ptr(Error(ErrorKind::kPeerFailure, text, rank));
    broken_flag_.store(true, std::memory_order_release);
  }
  aborted_.store(true, std::memory_order_release);
  if (reports_to_launcher)
    report_failure_to_launcher(world_ranks[static_cast<size_t>(rank)],
                               world_ranks[static_cast<size_t>(rank)]);
  if (transport) {
    transport->monitor().announce_failure(rank, detail::concat(rank_name(rank), " ", text));
    transport->waiter().wake();  // this rank's own waiter
  }
}

// One rank: every collective is a local copy (avg divides by 1: nothing to do).
void Communicator::Impl::run_single_rank(const algo::CollArgs& a) {
  switch (a.coll) {
    case Collective::kAllReduce:
    case Collective::kReduceScatter:
    case Collective::kAllGather:
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kGather:
    case Collective::kScatter:
    case Collective::kAllToAll:
      algo::copy_if_distinct(a.recv, a.send, a.bytes());
      break;
    default:
      break;
  }
}

}  // namespace chorus
