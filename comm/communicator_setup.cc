// A communicator's set-up and teardown: its store scope and id, the agreed choices (chunk size,
// tune table, deterministic mode), the transport and the ring; the goodbyes at destruction; and
// split(), which sets up a child the same way.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#include "chorus/config.h"
#include "chorus/kernels/cpu.h"
#include "chorus/log.h"
#include "chorus/timeout.h"
#include "communicator_impl.h"
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
      owns_bootstrap(s.owns_bootstrap),
      world_ranks(std::move(s.world_ranks)),
      group(std::move(s.group)),
      reports_to_launcher(s.owns_bootstrap || s.reports) {
  CHORUS_ARG_CHECK(size >= 1 && size <= kMaxWorldSize, "world_size ", size, " is out of range [1, ",
                   kMaxWorldSize, "]");
  CHORUS_ARG_CHECK(rank >= 0 && rank < size, "rank ", rank, " is out of range [0, ", size, ")");
  CHORUS_ARG_CHECK(root_store != nullptr, "the store is null");
  if (world_ranks.empty())
    for (int r = 0; r < size; ++r) world_ranks.push_back(r);
  timeout = resolve_timeout(s.options);
  selection.forced = resolve_algorithm(s.options);
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
  } catch (const Error& e) {
    // The peers waiting for this rank's keys learn why at once instead of at their deadline.
    std::exception_ptr named = name_ranks(e, std::current_exception());
    try {
      std::rethrow_exception(named);
    } catch (const std::exception& n) {
      store->report_failure(n.what());
    }
    if (owns_bootstrap && rank == 0) linger_after_failed_setup();
    std::rethrow_exception(named);
  } catch (const std::exception& e) {
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
  set_log_rank(world_ranks[static_cast<size_t>(rank)]);
  tune = std::move(s.tune);
  model = std::move(s.model);
  if (size > 1) {
    transport::Wiring wiring =
        transport::connect(rank, size, *store, "/chorus-" + job_id + "-" + comm_id, timeout);
    transport = std::move(wiring.transport);
    host_of = std::move(wiring.host_of);
    hosts = wiring.hosts;
    set_ring(wiring.places);
    exchange = std::make_unique<Exchange>(*transport, rank, size,
                                          WaitPolicy::for_ranks(local_ranks, wiring.host_cpus));
    agree_on_choices();
  }
  if (chunk_bytes == 0) chunk_bytes = transport::Capabilities::kDefaultChunkBytes;
  recorder =
      std::make_unique<FlightRecorder>(FlightRecorder::Identity{job_id, comm_id, rank, size}, 0);
  if (exchange) {
    exchange->publish_waiting_to(recorder->waiting());
    exchange->set_abort_flag(&aborted_);
  }
  make_selection();
  CHORUS_INFO(kLogInit, "communicator ", comm_id, " ready: rank ", rank, " of ", size,
              ", transport ", transport ? transport->name() : "none", ", kernels ",
              kernels::isa_name());
}

// What the selector needs, fixed from here on (the forced algorithm aside): the agreed choices,
// the hosts and what the transport can do.
void Communicator::Impl::make_selection() {
  selection.caps.world_size = size;
  selection.caps.hosts = hosts;
  selection.caps.fans_out = transport ? transport->capabilities().fans_out : true;
  selection.host_of = host_of;
  selection.deterministic = deterministic;
  selection.tune = tune.get();
  selection.model = model ? model->get() : nullptr;
  // One host whose ranks reach each other only over UCX prices its links as the network.
  selection.local = transport && transport->name() == "ucx" ? algo::Link::kUcx : algo::Link::kShm;
  selection.fifo_from_bytes = fifo_from_bytes;
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
    const size_t fifo_chunk =
        chunk_bytes != 0 ? chunk_bytes : transport::Capabilities::kDefaultChunkBytes;
    if (chunk_bytes == 0) chunk_bytes = transport->capabilities().chunk_bytes;
    algo::TuneTable t = tune ? *tune : algo::load_tune_table();
    // The cost model (CHORUS_TUNE=off: none), after the table, in a section of its own.
    std::string cost = "@cost off\n";
    ProbeConditions probe;
    if (model ? *model != nullptr : algo::tuning_enabled()) {
      const algo::CostModel m = model ? **model : algo::load_cost_model();
      cost = detail::concat("@cost ", m.origin, "\n", m.format());
      probe.model_defaults = !model && m.origin == "defaults";
    }
    // Whether this communicator probes the host first (host_probe.h): decided here, once.
    probe.world_size = size;
    probe.hosts = hosts;
    probe.shm = transport->name() == "shm";
    probe.table_named = !t.origin.empty();
    probe.forced = selection.forced.has_value();
    probe.deterministic = deterministic;
    const std::string skipped = host_probe_skipped(probe);
    if (skipped.empty()) {
      probe_lock = HostProbeLock::try_acquire(algo::default_cost_path());
      if (!probe_lock.held())
        CHORUS_INFO(kLogTune, "another job is probing this host (", algo::default_cost_path(),
                    ".probing); this one keeps the defaults");
    } else if (probe.model_defaults) {
      CHORUS_INFO(kLogTune, "no cost constants for this host and no probe: ", skipped);
    }
    // 0 says "no /fifo variants", so a threshold of 0 (everything single copy) counts as 1.
    const size_t single_copy_from = transport->capabilities().single_copy_from;
    const size_t fifo_from =
        single_copy_from == SIZE_MAX ? 0 : std::max<size_t>(1, single_copy_from);
    store->set("choices", detail::concat(chunk_bytes, " ", fifo_chunk, " ", fifo_from, " ",
                                         deterministic ? 1 : 0, " ", probe_lock.held() ? 1 : 0,
                                         "\n", t.origin, "\n", t.format(), cost));
  }
  const std::string text = store->get("choices", timeout);
  const size_t a = text.find('\n');
  const size_t b = text.find('\n', a + 1);
  CHORUS_CHECK(a != std::string::npos && b != std::string::npos, "malformed choices from rank 0");
  {
    std::istringstream first(text.substr(0, a));
    int root_deterministic = 0;
    int root_probes = 0;
    first >> chunk_bytes >> fifo_chunk_bytes >> fifo_from_bytes >> root_deterministic >>
        root_probes;
    probe_pending = root_probes == 1;
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
  const size_t c = text.find("@cost ", b + 1);
  CHORUS_CHECK(c != std::string::npos, "malformed choices from rank 0");
  if (!tune)
    tune = std::make_shared<const algo::TuneTable>(
        algo::TuneTable::parse(std::string_view(text).substr(b + 1, c - b - 1),
                               std::string_view(text).substr(a + 1, b - a - 1)));
  if (!model) {
    const size_t d = text.find('\n', c);
    CHORUS_CHECK(d != std::string::npos, "malformed choices from rank 0");
    const std::string origin = text.substr(c + 6, d - c - 6);
    model = origin == "off" ? nullptr
                            : std::make_shared<const algo::CostModel>(algo::CostModel::parse(
                                  std::string_view(text).substr(d + 1), origin));
  }
}

void Communicator::Impl::probe_host(Communicator& self) {
  probe_pending = false;
  const std::string path = algo::default_cost_path();
  const std::string text = probe_host_costs(self, path, probe_lock);
  model = std::make_shared<const algo::CostModel>(algo::CostModel::parse(text, path));
  make_selection();
  choices_.fill(Choice{});  // the memo holds choices by the defaults
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
      throw InvalidArgument(
          detail::concat(
              "two processes claim rank ", rank, ": ", previous, " and this one (", me,
              "); check the launcher's rank variables (CHORUS_RANK, RANK, SLURM_PROCID, ...)"),
          rank);
  }
  return "w" + std::to_string(k);
}

// Every rank must have been started with the same world size.
void Communicator::Impl::check_world_size() {
  if (rank == 0) store->set("world_size", std::to_string(size));
  const int root_size = std::stoi(store->get("world_size", timeout));
  if (root_size != size)
    throw InvalidArgument(
        detail::concat("this rank was started with world size ", size, " but rank 0 with ",
                       root_size, "; check the launcher's variables"),
        rank);
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
        transport->monitor().announce_failure(
            rank, detail::concat("rank ", rank,
                                 " destroyed the communicator while an exception "
                                 "was propagating (the application raised an error) after ",
                                 collectives, " collectives"));
      else
        transport->monitor().announce_exit();
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
               (transport && !transport->monitor().process_alive(r));
      });
      if (!pending.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } catch (...) {
    // Best effort, as above.
  }
}

std::optional<Communicator> Communicator::Impl::split(int color, int key, std::string_view name) {
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
  child.options.algorithm =
      selection.forced ? std::string(algo::to_string(*selection.forced)) : "auto";
  child.deterministic = deterministic;
  child.tune = tune;
  child.model = model;
  for (const auto& [k, parent_rank] : members)
    child.world_ranks.push_back(world_ranks[static_cast<size_t>(parent_rank)]);
  child.group = name.empty() ? "split group " + std::to_string(color) : std::string(name);
  child.reports = reports_to_launcher;
  return Communicator(std::make_shared<Impl>(std::move(child)));
}

std::string Communicator::Impl::rank_name(int r) const {
  if (group.empty() || r < 0 || r >= size) return "rank " + std::to_string(r);
  return detail::concat("rank ", r, " of ", group, " (world rank ",
                        world_ranks[static_cast<size_t>(r)], ")");
}

std::exception_ptr Communicator::Impl::name_ranks(const Error& e,
                                                  std::exception_ptr original) const {
  if (group.empty()) return original;
  // Every "rank N" that is not named yet ("world rank N", "rank N of ...") gets the group and its
  // world rank.
  const std::string& text = e.message();
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t at = text.find("rank ", i);
    if (at == std::string::npos) break;
    size_t end = at + 5;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end])) != 0) ++end;
    const bool number = end > at + 5;
    const bool word_start = at == 0 || std::isalnum(static_cast<unsigned char>(text[at - 1])) == 0;
    const bool named =
        (at >= 6 && text.compare(at - 6, 6, "world ") == 0) || text.compare(end, 4, " of ") == 0;
    out.append(text, i, at - i);
    if (number && word_start && !named) {
      out += rank_name(std::stoi(text.substr(at + 5, end - at - 5)));
    } else {
      out.append(text, at, end - at);
    }
    i = end;
  }
  out.append(text, i, std::string::npos);
  return relabeled(e, out, e.rank() >= 0 ? rank_name(e.rank()) : std::string());
}

}  // namespace chorus
