#include "communicator_impl.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "chorus/config.h"
#include "chorus/kernels/cpu.h"
#include "chorus/log.h"
#include "transport/shm/shm_transport.h"

namespace chorus {
namespace {

const DoubleKnob kTimeout{"CHORUS_TIMEOUT", 300.0,
                          "seconds an operation (or a set-up step) may take before it fails "
                          "with chorus::Timeout"};
const StringKnob kAlgo{"CHORUS_ALGO", "",
                       "force an algorithm for every collective that has it: ring, tree or "
                       "direct (default: chosen by size)"};
const IntKnob kChunkBytes{"CHORUS_CHUNK_BYTES", 256 << 10,
                          "pipelining unit of the ring, tree and chain algorithms"};

std::string random_job_id() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device rd;
  std::string id(12, 'x');
  for (char& ch : id) ch = kAlphabet[rd() % (sizeof kAlphabet - 1)];
  return id;
}

std::chrono::milliseconds resolve_timeout(const CommOptions& o) {
  if (o.timeout.count() > 0) return o.timeout;
  const double s = kTimeout.get();
  CHORUS_ARG_CHECK(s > 0, "CHORUS_TIMEOUT must be positive, got ", s);
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

std::optional<algo::Algorithm> resolve_algorithm(const CommOptions& o) {
  const std::string name = o.algorithm.empty() ? kAlgo.get() : o.algorithm;
  if (name.empty() || name == "auto") return std::nullopt;
  auto a = algo::parse_algorithm(name);
  CHORUS_ARG_CHECK(a.has_value(), "unknown algorithm '", name,
                   "' (CHORUS_ALGO / CommOptions::algorithm take ring, tree, direct or auto)");
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

Communicator::Impl::Impl(Setup s)
    : rank(s.rank), size(s.world_size), local_ranks(std::max(1, s.local_ranks)),
      root_store(std::move(s.store)) {
  CHORUS_ARG_CHECK(size >= 1, "world_size must be >= 1, got ", size);
  CHORUS_ARG_CHECK(rank >= 0 && rank < size, "rank ", rank, " is out of range [0, ", size, ")");
  CHORUS_ARG_CHECK(root_store != nullptr, "the store is null");
  timeout = resolve_timeout(s.options);
  forced = resolve_algorithm(s.options);
  chunk_bytes = static_cast<size_t>(kChunkBytes.get());
  CHORUS_ARG_CHECK(chunk_bytes >= 64 && chunk_bytes % 64 == 0, "CHORUS_CHUNK_BYTES=", chunk_bytes,
                   " must be a positive multiple of 64");

  // Communicators made the same way on every rank get the same id: rank r's k-th world
  // communicator on this store is "w<k>" on every rank.
  comm_id = s.comm_id.empty()
                ? "w" + std::to_string(root_store->add("chorus/instances/" + std::to_string(rank), 1))
                : s.comm_id;
  store = std::make_shared<PrefixStore>(root_store, "chorus/" + comm_id + "/");
  job_id = s.job_id;
  if (job_id.empty()) {
    if (rank == 0) store->set("job", random_job_id());
    job_id = store->get("job", timeout);
  }
  set_log_rank(rank);
  if (size > 1) {
    transport = std::make_unique<transport::ShmTransport>(
        rank, size, *store, "/chorus-" + job_id + "-" + comm_id, timeout,
        transport::ShmOptions::from_env());
    exchange = std::make_unique<Exchange>(*transport, rank, size, WaitPolicy::for_ranks(local_ranks));
  }
  CHORUS_INFO(kLogInit, "communicator ", comm_id, " ready: rank ", rank, " of ", size,
              ", transport ", transport ? transport->name() : "none", ", kernels ",
              kernels::isa_name());
}

Communicator::Impl::~Impl() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  finalize_store();
}

// The rank hosting the store keeps serving until every rank has finished with it (or the
// deadline passes: peers that died do not hold it up for long).
void Communicator::Impl::finalize_store() {
  if (!owns_bootstrap) return;
  try {
    root_store->set("chorus/bye/" + std::to_string(rank), "1");
    if (!server) return;
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back("chorus/bye/" + std::to_string(r));
    root_store->wait(keys, std::min(timeout, std::chrono::milliseconds(10000)));
  } catch (...) {
    // Best effort: a destructor never throws (a store already gone needs no goodbye).
  }
}

algo::Algorithm Communicator::Impl::choose(Collective coll, size_t bytes) const {
  if (forced && algo::find_algorithm(coll, *forced) != nullptr) return *forced;
  return algo::select_default(coll, bytes, size);
}

Work Communicator::Impl::submit(const algo::CollArgs& args, bool blocking) {
  // Bytes as chorus-bench counts them: the per-rank buffer, or the whole gathered/scattered one.
  size_t bytes = args.bytes();
  if (args.coll == Collective::kReduceScatter || args.coll == Collective::kAllGather)
    bytes *= static_cast<size_t>(size);
  Op op{args, next_seq++, choose(args.coll, bytes), std::make_shared<Work::State>()};
  op.state->algorithm = std::string(algo::to_string(op.algorithm));
  Work work(op.state);
  std::unique_lock lock(mu_);
  if (blocking && queue_.empty() && !running_) {
    running_ = true;
    lock.unlock();
    execute(op);
    lock.lock();
    running_ = false;
    lock.unlock();
    cv_.notify_all();
    return work;
  }
  queue_.push_back(std::move(op));
  if (!thread_.joinable()) thread_ = std::thread([this] { progress_loop(); });
  lock.unlock();
  cv_.notify_all();
  return work;
}

void Communicator::Impl::progress_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return (!queue_.empty() && !running_) || (stopping_ && queue_.empty()); });
    if (queue_.empty()) return;  // stopping
    Op op = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    execute(op);
    lock.lock();
    running_ = false;
    cv_.notify_all();
  }
}

void Communicator::Impl::synchronize() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !running_; });
}

void Communicator::Impl::execute(Op& op) {
  const std::string_view name = to_string(op.args.coll);
  if (broken_) {
    std::string why = "an earlier operation failed";
    try {
      std::rethrow_exception(broken_);
    } catch (const std::exception& e) {
      why = e.what();
    }
    op.state->complete(std::make_exception_ptr(
        Error(ErrorKind::kPeerFailure,
              "communicator is unusable after an earlier failure (" + why + ")", rank,
              std::string(name), op.seq)));
    return;
  }
  try {
    if (size == 1) {
      run_single_rank(op.args);
    } else {
      const algo::AlgoEntry* entry = algo::find_algorithm(op.args.coll, op.algorithm);
      CHORUS_CHECK(entry != nullptr, "no algorithm ", algo::to_string(op.algorithm), " for ", name);
      exchange->begin(name.data(), op.seq, entry->description, timeout);
      algo::Context ctx{rank, size, *exchange, scratch, chunk_bytes};
      entry->run(ctx, op.args);
    }
    op.state->complete(nullptr);
  } catch (const Error& e) {
    // Re-raise with this rank, operation and sequence number attached when missing.
    std::exception_ptr err = std::current_exception();
    if (e.op().empty())
      err = std::make_exception_ptr(Error(e.kind(), e.message(), rank, std::string(name), op.seq));
    broken_ = err;
    op.state->complete(err);
  } catch (const std::exception& e) {
    auto err = std::make_exception_ptr(
        Error(ErrorKind::kInternal, e.what(), rank, std::string(name), op.seq));
    broken_ = err;
    op.state->complete(err);
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
  return Communicator(std::make_shared<Impl>(std::move(child)));
}

}  // namespace chorus
