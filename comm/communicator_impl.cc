#include "communicator_impl.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <numeric>
#include <random>
#include <sstream>
#include <unistd.h>
#include <vector>

#include "chorus/config.h"
#include "chorus/kernels/cpu.h"
#include "chorus/log.h"
#include "chorus/timeout.h"
#include "launcher_report.h"
#include "transport/factory.h"
#include "transport/shm/shm_transport.h"

namespace chorus {
namespace {

const StringKnob kAlgo{"CHORUS_ALGO", "",
                       "force an algorithm for every collective that has it: ring, tree, "
                       "direct, twoshot or hier, each also as <name>/fifo (large messages copy "
                       "through shared memory instead of single copy) (default: the tuner's "
                       "choice)"};
const IntKnob kChunkBytes{"CHORUS_CHUNK_BYTES", 0,
                          "pipelining unit of the ring, tree and chain algorithms (0 = the "
                          "transport's preference: larger where peers read each other's memory "
                          "directly)"};

const IntKnob kStreamFrom{"CHORUS_STREAM_FROM", 16 << 20,
                          "results of at least this many bytes per rank are written with "
                          "streaming (non-temporal) stores, saving the read a cached store makes "
                          "of every line: broadcast and all-gather always, reductions out of "
                          "place (0 = never)"};

const IntKnob kDeterministic{"CHORUS_DETERMINISTIC", 0,
                             "1 = all_reduce, reduce_scatter and reduce add the ranks' "
                             "contributions in rank order, so their bits do not depend on the "
                             "algorithm, chunk size or ring (only rank-ordered algorithms run "
                             "them); 0 = the fastest algorithm (CommOptions::deterministic)"};

const StringKnob kRing{"CHORUS_RING", "locality",
                       "order of the ring and tree algorithms: locality = ranks grouped by host, "
                       "socket, NUMA node and bound CPU, so the ring leaves each once; rank = "
                       "rank order"};

std::string random_job_id() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device rd;
  std::string id(12, 'x');
  for (char& ch : id) ch = kAlphabet[rd() % (sizeof kAlphabet - 1)];
  return id;
}

bool resolve_deterministic(const CommOptions& o) {
  if (o.deterministic) return true;
  const int64_t v = kDeterministic.get();
  CHORUS_ARG_CHECK(v == 0 || v == 1, "CHORUS_DETERMINISTIC=", v, " (use 1 or 0)");
  return v == 1;
}

std::optional<algo::Variant> resolve_algorithm(const CommOptions& o) {
  const std::string name = o.algorithm.empty() ? kAlgo.get() : o.algorithm;
  if (name.empty() || name == "auto") return std::nullopt;
  auto a = algo::parse_variant(name);
  CHORUS_ARG_CHECK(a.has_value(), "unknown algorithm '", name,
                   "' (CHORUS_ALGO / CommOptions::algorithm take ", algo::algorithm_names(),
                   " or auto)");
  return a;
}

}  // namespace

void Work::State::complete(std::exception_ptr e) {
  {
    std::lock_guard lock(mu);
    error = std::move(e);
    done = true;
  }
  cv.notify_all();
}

std::chrono::milliseconds Communicator::Impl::resolve_timeout(const CommOptions& o) {
  CHORUS_ARG_CHECK(o.timeout.count() >= 0, "CommOptions::timeout ", o.timeout.count(),
                   " ms must not be negative (0 = CHORUS_TIMEOUT)");
  return o.timeout.count() > 0 ? clamp_timeout(o.timeout) : default_timeout();
}

Communicator::Impl::Impl(Setup s)
    : rank(s.rank),
      size(s.world_size),
      local_ranks(std::max(1, s.local_ranks)),
      root_store(std::move(s.store)),
      owns_bootstrap(s.owns_bootstrap) {
  CHORUS_ARG_CHECK(size >= 1 && size <= kMaxWorldSize, "world_size ", size, " is out of range [1, ",
                   kMaxWorldSize, "]");
  CHORUS_ARG_CHECK(rank >= 0 && rank < size, "rank ", rank, " is out of range [0, ", size, ")");
  CHORUS_ARG_CHECK(root_store != nullptr, "the store is null");
  timeout = resolve_timeout(s.options);
  forced = resolve_algorithm(s.options);
  deterministic = s.deterministic ? *s.deterministic : resolve_deterministic(s.options);
  chunk_bytes = static_cast<size_t>(kChunkBytes.get());
  CHORUS_ARG_CHECK(chunk_bytes % 64 == 0, "CHORUS_CHUNK_BYTES=", chunk_bytes,
                   " must be a positive multiple of 64 (or 0 for the transport's choice)");
  {
    const int64_t v = kStreamFrom.get();
    CHORUS_ARG_CHECK(v >= 0, "CHORUS_STREAM_FROM=", v, " must be >= 0 (0 = never)");
    stream_from_bytes = v == 0 ? SIZE_MAX : static_cast<size_t>(v);
  }

  // Communicators made the same way on every rank get the same id: rank r's k-th world
  // communicator on this store is "w<k>" on every rank.
  const bool world = s.comm_id.empty();
  comm_id = world ? claim_world_id() : s.comm_id;
  store = std::make_shared<SetupStore>(
      std::make_shared<PrefixStore>(root_store, "chorus/" + comm_id + "/"), rank, size);
  try {
    store->announce();
    if (world) check_world_size();
    set_up(s);
  } catch (const std::exception& e) {
    // The peers waiting for this rank's keys learn why at once instead of at their deadline.
    store->report_failure(e.what());
    if (owns_bootstrap && rank == 0) linger_after_failed_setup();
    throw;
  }
}

void Communicator::Impl::set_up(Setup& s) {
  job_id = s.job_id;
  if (job_id.empty()) {
    if (rank == 0) store->set("job", random_job_id());
    job_id = store->get("job", timeout);
  }
  set_log_rank(rank);
  tune = std::move(s.tune);
  if (size > 1) {
    transport::Wiring wiring =
        transport::connect(rank, size, *store, "/chorus-" + job_id + "-" + comm_id, timeout);
    transport = std::move(wiring.transport);
    host_of = std::move(wiring.host_of);
    hosts = wiring.hosts;
    set_ring(wiring.places);
    exchange =
        std::make_unique<Exchange>(*transport, rank, size,
                                   WaitPolicy::for_ranks(local_ranks, wiring.host_cpus));
    agree_on_choices();
  }
  if (chunk_bytes == 0) chunk_bytes = transport::Transport::kDefaultChunkBytes;
  recorder = std::make_unique<FlightRecorder>(FlightRecorder::Identity{job_id, comm_id, rank, size}, 0);
  if (exchange) {
    exchange->publish_waiting_to(recorder->waiting());
    exchange->set_abort_flag(&aborted_);
  }
  CHORUS_INFO(kLogInit, "communicator ", comm_id, " ready: rank ", rank, " of ", size,
              ", transport ", transport ? transport->name() : "none", ", kernels ",
              kernels::isa_name());
}

// Rank 0 of a from_env communicator whose set-up failed stays a moment, so that the store stays
// up while the others fail too: they then report their own errors (or this rank's) instead of a
// vanished store. The process's server outlives the communicator, but the process itself may
// exit right after this error.
void Communicator::Impl::linger_after_failed_setup() {
  try {
    const auto deadline = deadline_after(std::min(timeout, kTeardownBound));
    DeadlineScope scope(deadline);
    for (int r = 1; r < size && std::chrono::steady_clock::now() < deadline;) {
      if (store->peer_gone(r)) {
        ++r;
        continue;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  } catch (...) {
    // The original error is what matters.
  }
}

// Every rank must segment and choose alike, or their messages would not pair up: all take rank
// 0's chunk size (the transport's preference there, unless CHORUS_CHUNK_BYTES is set) and tune
// table, in one store key.
void Communicator::Impl::set_ring(const std::vector<algo::RankPlace>& places) {
  const std::string mode = kRing.get();
  CHORUS_ARG_CHECK(mode == "locality" || mode == "rank", "CHORUS_RING='", mode,
                   "' (use locality or rank)");
  ring.resize(static_cast<size_t>(size));
  std::iota(ring.begin(), ring.end(), 0);
  if (mode == "locality") ring = algo::ring_by_locality(places);
  ring_pos.assign(static_cast<size_t>(size), 0);
  for (int p = 0; p < size; ++p) ring_pos[static_cast<size_t>(ring[static_cast<size_t>(p)])] = p;
  if (rank == 0 && !std::is_sorted(ring.begin(), ring.end())) {
    std::string order;
    for (int r : ring) order += detail::concat(order.empty() ? "" : " ", r);
    CHORUS_INFO(kLogInit, "ring order by locality: ", order);
  }
}

void Communicator::Impl::agree_on_choices() {
  if (rank == 0) {
    // The FIFO path pipelines in the transport's default unit (as when nothing is single copy).
    const size_t fifo_chunk = chunk_bytes != 0 ? chunk_bytes : transport::Transport::kDefaultChunkBytes;
    if (chunk_bytes == 0) chunk_bytes = transport->preferred_chunk_bytes();
    algo::TuneTable t = tune ? *tune : algo::load_tune_table();
    // 0 says "no /fifo variants", so a threshold of 0 (everything single copy) counts as 1.
    const size_t fifo_from =
        transport->single_copy_anywhere() ? std::max<size_t>(1, transport->single_copy_threshold()) : 0;
    store->set("choices", detail::concat(chunk_bytes, " ", fifo_chunk, " ", fifo_from, " ",
                                         deterministic ? 1 : 0, "\n", t.origin, "\n", t.format()));
  }
  const std::string text = store->get("choices", timeout);
  const size_t a = text.find('\n');
  const size_t b = text.find('\n', a + 1);
  CHORUS_CHECK(a != std::string::npos && b != std::string::npos, "malformed choices from rank 0");
  {
    std::istringstream first(text.substr(0, a));
    int root_deterministic = 0;
    first >> chunk_bytes >> fifo_chunk_bytes >> fifo_from_bytes >> root_deterministic;
    CHORUS_CHECK(!first.fail(), "malformed choices from rank 0");
    // A rank folding in another order than its peers would silently break the promise.
    if (root_deterministic != (deterministic ? 1 : 0))
      throw InvalidArgument(
          detail::concat("rank 0 runs with deterministic reductions ",
                         root_deterministic != 0 ? "on" : "off", " but this rank with them ",
                         deterministic ? "on" : "off",
                         "; set CHORUS_DETERMINISTIC (or CommOptions::deterministic) alike on "
                         "every rank"),
          rank);
  }
  if (!tune)
    tune = std::make_shared<const algo::TuneTable>(algo::TuneTable::parse(
        std::string_view(text).substr(b + 1), std::string_view(text).substr(a + 1, b - a - 1)));
}

// Rank r's k-th world communicator on this store is "w<k>" on every rank. Each claim records
// its process, so a second process started with the same rank is caught here instead of
// silently joining as someone else's next communicator.
std::string Communicator::Impl::claim_world_id() {
  const std::string me = detail::concat(transport::local_host_id(), " pid ", ::getpid());
  const std::string r = std::to_string(rank);
  const int64_t k = root_store->add("chorus/instances/" + r, 1);
  root_store->set(detail::concat("chorus/instance_owner/", r, "/", k), me);
  if (k > 1) {
    const std::string previous =
        root_store->get(detail::concat("chorus/instance_owner/", r, "/", k - 1), timeout);
    if (previous != me)
      throw InvalidArgument(detail::concat(
          "two processes claim rank ", rank, ": ", previous, " and this one (", me,
          "); check the launcher's rank variables (CHORUS_RANK, RANK, SLURM_PROCID, ...)"), rank);
  }
  return "w" + std::to_string(k);
}

// Every rank must have been started with the same world size.
void Communicator::Impl::check_world_size() {
  if (rank == 0) store->set("world_size", std::to_string(size));
  const int root_size = std::stoi(store->get("world_size", timeout));
  if (root_size != size)
    throw InvalidArgument(detail::concat("this rank was started with world size ", size,
                                         " but rank 0 with ", root_size,
                                         "; check the launcher's variables"), rank);
}

Communicator::Impl::~Impl() {
  {
    // Teardown never waits long for the store: its host may be stopped or gone.
    DeadlineScope scope(deadline_after(std::min(timeout, kTeardownBound)));
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    // Peers still waiting for this rank learn that it left instead of timing out; a communicator
    // destroyed by an exception unwinding the stack is a failure, not a normal end.
    if (transport) {
      if (std::uncaught_exceptions() > 0)
        transport->announce_failure(
            rank, detail::concat("rank ", rank,
                                 " destroyed the communicator while an exception "
                                 "was propagating (the application raised an error) after ",
                                 collectives, " collectives"));
      else
        transport->announce_exit();
    }
    say_goodbye();
  }
  wait_for_goodbyes();
}

// Rank 0 serves the store (for the process, comm/bootstrap/process_server.h), and its process may
// exit right after this: it waits until every rank has finished with this communicator's part of
// the store. Each says goodbye; a rank whose process is gone is not waited for. Bounded: by
// min(timeout, 10 s), or min(timeout, kTeardownBound) once the communicator is broken (the others
// are failing too and need nothing more from the store).
void Communicator::Impl::say_goodbye() {
  if (!owns_bootstrap || !store) return;
  try {
    store->set("bye/" + std::to_string(rank), "1");
  } catch (...) {
    // Best effort: a destructor never throws (a store already gone needs no goodbye).
  }
}

void Communicator::Impl::wait_for_goodbyes() {
  if (!owns_bootstrap || !store || rank != 0) return;
  try {
    const auto bound = broken_flag_.load(std::memory_order_acquire)
                           ? std::min(timeout, kTeardownBound)
                           : std::min(timeout, std::chrono::milliseconds(10000));
    const auto deadline = deadline_after(bound);
    DeadlineScope scope(deadline);
    std::vector<int> pending;
    for (int r = 1; r < size; ++r) pending.push_back(r);
    while (!pending.empty() && std::chrono::steady_clock::now() < deadline) {
      std::erase_if(pending, [&](int r) {
        return store->try_get("bye/" + std::to_string(r)).has_value() ||
               (transport && !transport->process_alive(r));
      });
      if (!pending.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } catch (...) {
    // Best effort, as above.
  }
}

// A forced algorithm runs where the collective has it, except a reduction in deterministic mode
// that it would not fold in rank order: that one runs as the selector chooses (communicator.h,
// "Deterministic mode"), and rank 0 says so once.
algo::Variant Communicator::Impl::choose(Collective coll, size_t bytes) const {
  if (!forced || algo::find_algorithm(coll, forced->algo) == nullptr)
    return choose_by_size(coll, bytes);
  if (!deterministic || algo::folds_in_rank_order(coll, forced->algo)) return *forced;
  const algo::Variant v = choose_by_size(coll, bytes);
  const size_t logged = static_cast<size_t>(coll) * 8 + static_cast<size_t>(forced->algo);
  if (rank == 0 && !substitutions_logged_.test(logged)) {
    substitutions_logged_.set(logged);
    CHORUS_INFO(kLogColl, "deterministic reductions: the forced algorithm ",
                algo::to_string(*forced), " does not fold ", to_string(coll), " in rank order; ",
                to_string(coll), " runs as chosen by size instead (", algo::to_string(v), " at ",
                bytes, " bytes)");
  }
  return v;
}

algo::Variant Communicator::Impl::choose_by_size(Collective coll, size_t bytes) const {
  Choice& c = choices_[(bytes * 31 + static_cast<size_t>(coll)) % choices_.size()];
  if (c.bytes == bytes && c.coll == coll) return c.algo;
  std::optional<algo::Variant> a;
  // The tune table is measured on one host; across hosts the hierarchical rules apply, unless
  // reductions must fold in rank order (hier does not).
  const algo::Algorithm fixed = deterministic ? algo::select_rank_ordered(coll, bytes, size)
                                              : algo::select_default(coll, bytes, size, host_of);
  // Broadcast by its in-place curves: the receivers' work is the same either way, and in place
  // is how a broadcast is mostly called (MPI_Bcast, torch.distributed.broadcast, the span
  // overload); an out-of-place root adds its own copy to any algorithm. Every rank chooses
  // alike, whatever its own buffers. Deterministic mode picks among the rank-ordered variants,
  // and only where the table measured the fixed choice: a table without reduce_scatter twoshot
  // would otherwise send large reduce-scatters through the direct one.
  if (hosts == 1 && tune &&
      (!deterministic || tune->predict_us(size, coll, algo::Variant{fixed}, bytes)))
    a = tune->fastest(size, coll, bytes, fixed, coll == Collective::kBroadcast, deterministic);
  // Below the single-copy threshold no message can go single copy: the "/fifo" variant is the
  // same code as the plain one, and only noise in the table could have picked it.
  if (a && a->path == algo::Path::kFifo && (fifo_from_bytes == 0 || bytes < fifo_from_bytes))
    a = algo::Variant{a->algo};
  c = {bytes, coll, a ? *a : fixed};
  return c.algo;
}

// A receiver takes a message of either kind, single copy or through the FIFO, so a rank may pick
// the path of its own sends without the others knowing (the pipelining unit stays the agreed
// variant's). The root of a broadcast uses that: the selector chose the algorithm and its path by
// the table's in-place curves (choose()), but an out-of-place root also copies its buffer into
// place meanwhile, and single copy then often wins where in place the copy shared through the
// FIFO does (docs/PERFORMANCE.md). So the root follows the chosen algorithm's curves of its own
// placement, when there are both and the selector chose (not a forced algorithm), for host
// memory, from the single-copy threshold up (below it every send goes through the FIFO anyway).
bool Communicator::Impl::sends_through_fifo(const algo::CollArgs& a, algo::Variant v,
                                            size_t bytes, bool on_device) const {
  const bool agreed = v.path == algo::Path::kFifo;
  if (a.coll != Collective::kBroadcast || a.root != rank || on_device || forced || !tune ||
      hosts != 1 || fifo_from_bytes == 0 || bytes < fifo_from_bytes)
    return agreed;
  const auto path = tune->path_for(size, a.coll, v.algo, bytes, a.send == a.recv);
  return path ? *path == algo::Path::kFifo : agreed;
}

std::vector<AlgorithmEstimate> Communicator::Impl::explain(Collective coll, size_t bytes) const {
  std::vector<AlgorithmEstimate> out;
  const algo::Variant chosen = choose(coll, bytes);
  for (const algo::AlgoEntry& e : algo::all_algorithms()) {
    if (e.coll != coll || !algo::runs_on_hosts(e.algo, hosts)) continue;
    if (deterministic && !algo::folds_in_rank_order(coll, e.algo)) continue;
    for (algo::Path path : {algo::Path::kSingleCopy, algo::Path::kFifo}) {
      const algo::Variant v{e.algo, path};
      // The FIFO variants only where they differ: some peer is read single-copy, and the
      // algorithm has two paths (algo::has_paths). A forced or tuned one is listed anyway, since
      // it is what runs.
      if (path == algo::Path::kFifo && (fifo_from_bytes == 0 || !algo::has_paths(e.algo)) &&
          v != chosen)
        continue;
      AlgorithmEstimate est;
      est.algorithm = std::string(algo::to_string(v));
      est.chosen = v == chosen;
      if (tune && hosts == 1) {
        // What the choice compared: broadcast's in-place curve where there is one.
        auto us = coll == Collective::kBroadcast ? tune->predict_us(size, coll, v, bytes, true)
                                                 : std::nullopt;
        if (!us) us = tune->predict_us(size, coll, v, bytes);
        if (us) est.predicted_us = *us;
      }
      out.push_back(std::move(est));
    }
  }
  return out;
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
  // Bytes as chorus-bench counts them: the per-rank buffer, or the whole gathered/scattered one.
  size_t bytes = args.bytes();
  if (args.coll == Collective::kReduceScatter || args.coll == Collective::kAllGather)
    bytes *= static_cast<size_t>(size);
  const bool p2p = is_point_to_point(args.coll);
  Op op{args, collectives, choose(args.coll, bytes), nullptr, {},
        call_timeout.count() > 0 ? call_timeout : timeout, 0, std::move(device)};
  op.fifo_sends = sends_through_fifo(args, op.algorithm, bytes, op.device.has_value());
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
    op.state->complete(op.device ? execute_device(op) : execute(op));
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

std::exception_ptr Communicator::Impl::execute(Op& op) {
  const std::string_view name = to_string(op.args.coll);
  if (broken_flag_.load(std::memory_order_acquire)) {
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
    recorder->finished(op.record, "not run: communicator unusable");
    return std::make_exception_ptr(
        Error(ErrorKind::kPeerFailure,
              "communicator is unusable after an earlier failure (" + why + ")", rank,
              std::string(name), op.seq));
  }
  try {
    if (size == 1) {
      run_single_rank(op.args);
    } else {
      const algo::AlgoEntry* entry = algo::find_algorithm(op.args.coll, op.algorithm.algo);
      CHORUS_CHECK(entry != nullptr, "no algorithm ", algo::to_string(op.algorithm), " for ", name);
      // The pipelining unit follows the agreed path; the sends, this rank's own.
      const bool fifo = op.algorithm.path == algo::Path::kFifo;
      exchange->begin(name.data(), op.seq, entry->description, op.timeout, op.stamp,
                      op.fifo_sends);
      algo::Context ctx{rank,     size, *exchange, scratch, fifo ? fifo_chunk_bytes : chunk_bytes,
                        host_of,  ring, ring_pos, stream_from_bytes};
      ctx.rank_order = deterministic;
      entry->run(ctx, op.args);
      transport->count_completed();
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
  {
    std::lock_guard lock(mu_);
    if (!broken_) broken_ = error;
    broken_flag_.store(true, std::memory_order_release);
  }
  const int cause = e.kind() == ErrorKind::kPeerFailure && e.peer() >= 0 ? e.peer() : rank;
  if (owns_bootstrap) report_failure_to_launcher(rank, blamed_rank(e, rank, size));
  if (transport) {
    transport->announce_failure(cause, e.what());
    transport->abandon();
  }
  recorder->finished(op.record, e.what());
  if (e.kind() != ErrorKind::kInvalidArgument) {
    const std::string path = recorder->dump_to_dir(e.what());
    CHORUS_WARN(kLogColl, e.what(), "\nlast operations of communicator ", comm_id, ":\n",
                recorder->summary(8),
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
  if (owns_bootstrap) report_failure_to_launcher(rank, rank);
  if (transport) {
    transport->announce_failure(rank, detail::concat("rank ", rank, " ", text));
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

std::optional<Communicator> Communicator::Impl::split(int color, int key) {
  CHORUS_ARG_CHECK(color >= 0 || color == kNoColor, "split: color ", color,
                   " must be >= 0 or kNoColor");
  const int64_t mine[2] = {color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(size));
  algo::CollArgs a;
  a.coll = Collective::kAllGather;
  a.send = reinterpret_cast<const std::byte*>(mine);
  a.recv = reinterpret_cast<std::byte*>(all.data());
  a.count = 2;
  a.dtype = DataType::kI64;
  submit(a, true).wait();
  const int index = splits++;
  if (color == kNoColor) return std::nullopt;

  std::vector<std::pair<int64_t, int>> members;  // (key, parent rank)
  for (int r = 0; r < size; ++r)
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  std::sort(members.begin(), members.end());
  Setup child;
  child.world_size = static_cast<int>(members.size());
  for (int i = 0; i < child.world_size; ++i)
    if (members[i].second == rank) child.rank = i;
  child.local_ranks = local_ranks;
  child.store = root_store;
  child.job_id = job_id;
  child.comm_id = comm_id + "." + std::to_string(index) + "c" + std::to_string(color);
  child.options.timeout = timeout;
  child.options.algorithm = forced ? std::string(algo::to_string(*forced)) : "auto";
  child.deterministic = deterministic;
  child.tune = tune;
  return Communicator(std::make_shared<Impl>(std::move(child)));
}

}  // namespace chorus
