// Multi-host jobs: the UCX transport, the shm+ucx composite and the hierarchical all-reduce.
//
// Netns*: every "host" is a network namespace joined to the others by veth pairs on a bridge
// (netns_hosts.h); UCX is confined to tcp on the veth device, so every byte between hosts crosses
// it (checked on its counters). These need root and skip with the reason otherwise.
// OneMachine*: the same jobs with hosts told apart only by CHORUS_HOST_ID (UCX then picks its own
// wire, shared memory included): they run anywhere.
// Results are checked exactly against the reference (tests/comm/reference.h).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "collective_cases.h"
#include "fold_cases.h"
#include "netns_hosts.h"

namespace chorus::testing {
namespace {

constexpr size_t kLargeCount = (size_t{1} << 20) + 3;

bool reduces(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}
bool rooted(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather ||
         c == Collective::kScatter;
}

// Fanout is left out: it needs every rank on one host with a shared buffer, which no job here
// has, and a forced fanout is refused (ForcedFanoutWithoutASharedBufferIsRefused).
std::vector<std::string> algorithms(Collective coll) {
  std::vector<std::string> a = algorithms_of(coll);
  std::erase(a, "fanout");
  if (coll == Collective::kAllReduce) a.push_back("hier");
  return a;
}

// Every collective x algorithm x dtype x op x count {0, 1, 7, 1000} x in-place, roots 0 and n-1;
// then 2^20 + 3 elements with the default algorithm (every dtype with one op, every op with
// float) and, for all-reduce, with every algorithm.
std::vector<Case> matrix(int n) {
  std::vector<Case> cases;
  int salt = 0;
  const Collective colls[] = {Collective::kAllReduce, Collective::kReduceScatter,
                              Collective::kAllGather, Collective::kBroadcast,
                              Collective::kReduce,    Collective::kGather,
                              Collective::kScatter,   Collective::kAllToAll};
  for (Collective coll : colls) {
    const std::vector<ReduceOp> ops =
        reduces(coll) ? std::vector<ReduceOp>(std::begin(kAllReduceOps), std::end(kAllReduceOps))
                      : std::vector<ReduceOp>{ReduceOp::kSum};
    const std::vector<int> roots = rooted(coll) ? std::vector<int>{0, n - 1} : std::vector<int>{0};
    for (const std::string& algo : algorithms(coll))
      for (int root : roots)
        for (bool in_place : {false, true}) {
          if (in_place && coll == Collective::kAllToAll) continue;
          for (DataType dtype : kAllDataTypes)
            for (ReduceOp op : ops)
              for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}})
                cases.push_back({coll, algo, dtype, op, count, in_place, root, ++salt});
        }
    for (DataType dtype : kAllDataTypes)
      cases.push_back({coll, "auto", dtype, ops[0], kLargeCount, false, n - 1, ++salt});
    for (size_t i = 1; i < ops.size(); ++i)
      cases.push_back({coll, "auto", DataType::kF32, ops[i], kLargeCount, true, 0, ++salt});
    if (coll == Collective::kAllReduce)
      for (const std::string& algo : algorithms(coll))
        for (bool in_place : {false, true})
          cases.push_back(
              {coll, algo, DataType::kBF16, ReduceOp::kSum, kLargeCount, in_place, 0, ++salt});
  }
  return cases;
}

// All-reduce only, every algorithm, mid and large counts (the hierarchical layouts).
std::vector<Case> all_reduce_cases() {
  std::vector<Case> cases;
  int salt = 0;
  for (const std::string& algo : algorithms(Collective::kAllReduce))
    for (bool in_place : {false, true})
      for (DataType dtype : kAllDataTypes)
        for (ReduceOp op : kAllReduceOps)
          for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{65537}})
            cases.push_back({Collective::kAllReduce, algo, dtype, op, count, in_place, 0, ++salt});
  for (const std::string& algo : algorithms(Collective::kAllReduce))
    for (ReduceOp op : kAllReduceOps)
      cases.push_back(
          {Collective::kAllReduce, algo, DataType::kF32, op, kLargeCount, false, 0, ++salt});
  return cases;
}

void run_cases(Communicator& comm, const std::vector<Case>& cases) {
  for (const Case& k : cases) {
    run_and_check(comm, k);
    if (::testing::Test::HasFailure()) return;  // one clear failure, not a cascade
  }
}

// Rank `victim` dies (SIGKILL, no goodbye) after one good all-reduce, while the others wait for
// it in the next one: they must fail with PeerFailure naming it, not hang.
void peer_death_body(Communicator& comm, int victim) {
  std::vector<float> buf(1000, 1.0f);
  comm.all_reduce(buf.data(), buf.data(), buf.size(), DataType::kF32, ReduceOp::kSum);
  EXPECT_EQ(buf[0], static_cast<float>(comm.size()));
  if (comm.rank() == victim) {
    ::usleep(50'000);  // the others are waiting by now
    ::kill(::getpid(), SIGKILL);
  }
  try {
    comm.all_reduce(buf.data(), buf.data(), buf.size(), DataType::kF32, ReduceOp::kSum);
    ADD_FAILURE() << "rank " << comm.rank() << ": the all-reduce succeeded without rank " << victim;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kPeerFailure) << e.what();
    EXPECT_EQ(e.peer(), victim) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(victim)), std::string::npos)
        << e.what();
  }
}

// The last operation is a 16 MiB all-to-all. A rank returns (leaves the communicator) the moment
// its side is done, while the tail of what it sent may still be on the wire: the others must
// receive all of it, not take the notice that it left for a failure.
void last_message_body(Communicator& comm) {
  constexpr size_t kCount = size_t{4} << 20;
  const size_t n = static_cast<size_t>(comm.size());
  std::vector<float> in(kCount), out(kCount);
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < kCount; ++i)
      in[i] = static_cast<float>((i + round + 7 * comm.rank()) % 1000);
    std::fill(out.begin(), out.end(), -1.0f);
    comm.set_algorithm("direct");
    // Each rank's block b goes to rank b: out block s holds rank s's block for this rank.
    comm.all_to_all(in.data(), out.data(), kCount / n, DataType::kF32);
    size_t wrong = 0;
    const size_t block = kCount / n;
    for (size_t s = 0; s < n; ++s)
      for (size_t j = 0; j < block; ++j) {
        const size_t i = comm.rank() * block + j;  // index in rank s's input
        wrong += out[s * block + j] != static_cast<float>((i + round + 7 * s) % 1000);
      }
    EXPECT_EQ(wrong, 0u) << "round " << round;
  }
}

// Rank 1 stops calling after one all-reduce and leaves; rank 0's second all-reduce must fail
// naming it, soon (its closed connection tells), not after the deadline.
void stop_early_body(Communicator& comm) {
  std::vector<float> buf(1000, 1.0f);
  comm.all_reduce(buf.data(), buf.data(), buf.size(), DataType::kF32, ReduceOp::kSum);
  if (comm.rank() == 1) return;
  const auto start = std::chrono::steady_clock::now();
  try {
    comm.all_reduce(buf.data(), buf.data(), buf.size(), DataType::kF32, ReduceOp::kSum);
    ADD_FAILURE() << "the all-reduce succeeded without rank 1";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kPeerFailure) << e.what();
    EXPECT_EQ(e.peer(), 1) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1 left the communicator after 1 operations"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

std::vector<int> layout(int hosts, int per_host) {
  std::vector<int> host_of;
  for (int h = 0; h < hosts; ++h)
    for (int i = 0; i < per_host; ++i) host_of.push_back(h);
  return host_of;
}

// ---- namespaces: real network between "hosts" ------------------------------------------------

class Netns : public ::testing::Test {
 protected:
  void make_hosts(int n) {
    if (auto why = NetnsHosts::unavailable()) GTEST_SKIP() << *why;
    hosts_ = std::make_unique<NetnsHosts>(n);
  }
  void TearDown() override { hosts_.reset(); }
  std::unique_ptr<NetnsHosts> hosts_;
};

TEST_F(Netns, TwoHostsCollectiveMatrix) {
  make_hosts(2);
  if (!hosts_) return;
  const auto cases = matrix(2);
  run_on_hosts(hosts_.get(), layout(2, 1), [&](Communicator& comm) { run_cases(comm, cases); });
}

TEST_F(Netns, TwoByTwoCollectiveMatrix) {
  make_hosts(2);
  if (!hosts_) return;
  const auto cases = matrix(4);
  run_on_hosts(hosts_.get(), layout(2, 2), [&](Communicator& comm) { run_cases(comm, cases); },
               {std::chrono::milliseconds(240000), {}, {}});
}

TEST_F(Netns, ThreeHostsHierarchicalAllReduce) {
  make_hosts(3);
  if (!hosts_) return;
  const auto cases = all_reduce_cases();
  run_on_hosts(hosts_.get(), layout(3, 1), [&](Communicator& comm) { run_cases(comm, cases); });
}

TEST_F(Netns, UnevenHostsHierarchicalAllReduce) {  // 2 + 1 ranks: one extra rank on host 0
  make_hosts(2);
  if (!hosts_) return;
  const auto cases = all_reduce_cases();
  run_on_hosts(hosts_.get(), {0, 0, 1}, [&](Communicator& comm) { run_cases(comm, cases); });
}

// Every byte between hosts crosses the veth pair: host 0's counters grow by at least what the
// hierarchical all-reduce must move between the hosts.
TEST_F(Netns, InterHostBytesCrossTheVeth) {
  make_hosts(2);
  if (!hosts_) return;
  constexpr size_t kCount = 4 << 20;  // floats per rank: 16 MiB
  constexpr int kIters = 4;
  const auto before = hosts_->counters(0);
  run_on_hosts(hosts_.get(), layout(2, 2), [&](Communicator& comm) {
    std::vector<float> buf(kCount);
    for (int it = 0; it < kIters; ++it) {
      for (size_t i = 0; i < kCount; ++i) buf[i] = static_cast<float>((comm.rank() + i + it) % 5);
      comm.set_algorithm("hier");
      comm.all_reduce(buf.data(), buf.data(), kCount, DataType::kF32, ReduceOp::kSum);
      size_t wrong = 0;
      for (size_t i = 0; i < kCount; ++i) {
        float want = 0;
        for (int r = 0; r < comm.size(); ++r) want += static_cast<float>((r + i + it) % 5);
        wrong += buf[i] != want;
      }
      EXPECT_EQ(wrong, 0u) << "iteration " << it;
    }
  });
  const auto after = hosts_->counters(0);
  // Per all-reduce each of host 0's two rails sends and receives half of its slice (B/2 / 2)
  // twice (ring of two hosts: reduce-scatter + all-gather): B/2 per rail, B per host each way.
  const uint64_t bytes = uint64_t{kCount} * sizeof(float) * kIters;
  EXPECT_GE(after.tx - before.tx, bytes) << "host 0 sent less over its veth than the job needs";
  EXPECT_GE(after.rx - before.rx, bytes) << "host 0 received less over its veth than the job needs";
  // ... and not wildly more (intra-host traffic stays off the wire).
  EXPECT_LT(after.tx - before.tx, bytes * 3 / 2);
  std::printf("veth of host 0: tx %.1f MiB, rx %.1f MiB for %.1f MiB of inter-host data\n",
              (after.tx - before.tx) / 1048576.0, (after.rx - before.rx) / 1048576.0,
              bytes / 1048576.0);
}

// Ranks placed cyclically (rank r on host r % 2, as Slurm's --distribution=cyclic does): the
// communicator's ring groups each host's ranks (0 2 1 3), so a ring all-gather crosses between the
// hosts on two ring edges instead of all four, and host 0's veth carries half the bytes that the
// rank-order ring (CHORUS_RING=rank) puts on it.
TEST_F(Netns, CyclicRanksRingCrossesEachHostOnce) {
  make_hosts(2);
  if (!hosts_) return;
  constexpr size_t kCount = 1 << 20;  // floats per rank: 4 MiB
  const std::vector<int> cyclic = {0, 1, 0, 1};
  auto sent_by_host0 = [&](const char* ring) {
    const auto before = hosts_->counters(0);
    HostRunOptions o;
    o.env = {{"CHORUS_RING", ring}};
    run_on_hosts(
        hosts_.get(), cyclic,
        [&](Communicator& comm) {
          if (std::string(ring) == "locality")
            EXPECT_EQ(comm.ring_order(), (std::vector<int>{0, 2, 1, 3}));
          std::vector<float> mine(kCount, static_cast<float>(comm.rank() + 1));
          std::vector<float> all(kCount * comm.size());
          comm.set_algorithm("ring");
          comm.all_gather(mine.data(), all.data(), kCount, DataType::kF32);
          size_t wrong = 0;
          for (size_t i = 0; i < all.size(); ++i)
            wrong += all[i] != static_cast<float>(i / kCount + 1);
          EXPECT_EQ(wrong, 0u);
        },
        o);
    return hosts_->counters(0).tx - before.tx;
  };
  const uint64_t block = uint64_t{kCount} * sizeof(float);
  const uint64_t by_locality = sent_by_host0("locality");
  const uint64_t by_rank = sent_by_host0("rank");
  // Locality ring: one edge leaves host 0 (rank 2 -> 1) and carries n - 1 = 3 blocks.
  EXPECT_GE(by_locality, 3 * block);
  EXPECT_LT(by_locality, 4 * block);
  // Rank order: both of host 0's ranks send their 3 blocks to host 1.
  EXPECT_GE(by_rank, 6 * block);
  std::printf(
      "veth of host 0, ring all-gather of 4 x %.0f MiB: %.1f MiB sent with the locality "
      "ring, %.1f MiB in rank order\n",
      block / 1048576.0, by_locality / 1048576.0, by_rank / 1048576.0);
}

TEST_F(Netns, PeerDeathIsNamed) {
  make_hosts(2);
  if (!hosts_) return;
  HostRunOptions o;
  o.may_fail = {1};
  o.deadline = std::chrono::milliseconds(60000);
  run_on_hosts(
      hosts_.get(), layout(2, 1), [](Communicator& comm) { peer_death_body(comm, 1); }, o);
}

TEST_F(Netns, PeerDeathIsNamedAcrossComposite) {
  make_hosts(2);
  if (!hosts_) return;
  HostRunOptions o;
  o.may_fail = {3};
  o.deadline = std::chrono::milliseconds(60000);
  run_on_hosts(
      hosts_.get(), layout(2, 2), [](Communicator& comm) { peer_death_body(comm, 3); }, o);
}

TEST_F(Netns, LastMessagesArriveAfterTheSenderLeft) {
  make_hosts(2);
  if (!hosts_) return;
  for (int run = 0; run < 3; ++run) run_on_hosts(hosts_.get(), layout(2, 1), last_message_body);
}

TEST_F(Netns, StoppingEarlyIsNamed) {
  make_hosts(2);
  if (!hosts_) return;
  run_on_hosts(hosts_.get(), layout(2, 1), stop_early_body);
}

// ---- one machine: hosts told apart by CHORUS_HOST_ID only -----------------------------------

TEST(OneMachine, ForcedUcxCollectiveMatrix) {
  const auto cases = matrix(3);
  run_on_hosts(nullptr, {0, 0, 0}, [&](Communicator& comm) { run_cases(comm, cases); },
               {std::chrono::milliseconds(240000), {{"CHORUS_TRANSPORT", "ucx"}}, {}});
}

// Fanout cannot run across hosts, nor on one host over UCX (no shared buffer): forced, a call of
// a collective that has it is an InvalidArgument naming the reason, and the communicator stays
// usable; the collectives without fanout run as chosen.
TEST(OneMachine, ForcedFanoutWithoutASharedBufferIsRefused) {
  for (const bool one_host : {false, true}) {
    SCOPED_TRACE(one_host ? "one host over UCX" : "two hosts");
    const std::vector<int> hosts = one_host ? std::vector<int>{0, 0} : layout(2, 1);
    HostRunOptions options{std::chrono::milliseconds(60000), {}, {}};
    if (one_host) options.env["CHORUS_TRANSPORT"] = "ucx";
    run_on_hosts(
        nullptr, hosts,
        [&](Communicator& comm) {
          comm.set_algorithm("fanout");
          std::vector<float> v(1024, 1.0f);
          try {
            comm.broadcast(v.data(), v.data(), v.size(), DataType::kF32, 0);
            ADD_FAILURE() << "a forced fanout ran without a shared buffer";
          } catch (const InvalidArgument& e) {
            EXPECT_NE(std::string(e.what()).find("fanout cannot run"), std::string::npos)
                << e.what();
          }
          comm.all_reduce(v.data(), v.data(), v.size(), DataType::kF32, ReduceOp::kSum);
          EXPECT_EQ(v[0], 2.0f);
        },
        options);
  }
}

TEST(OneMachine, TwoByTwoHierarchicalAllReduce) {
  const auto cases = all_reduce_cases();
  run_on_hosts(nullptr, layout(2, 2), [&](Communicator& comm) { run_cases(comm, cases); });
}

// Deterministic mode across hosts: hier does not fold in rank order, so all-reduce runs the
// two-shot (or direct) algorithm over the composite transport instead, forced hier included, and
// every reduction equals the serial rank-order fold bit for bit (fold_cases.h).
TEST(OneMachine, TwoByTwoDeterministicReductions) {
  run_on_hosts(nullptr, layout(2, 2),
               [](Communicator& comm) {
                 EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 1 << 20), "twoshot");
                 comm.set_algorithm("hier");
                 EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 1 << 20), "twoshot");
                 comm.set_algorithm("auto");
                 int salt = 0;
                 for (Collective coll :
                      {Collective::kAllReduce, Collective::kReduceScatter, Collective::kReduce})
                   for (DataType dtype : {DataType::kF32, DataType::kBF16})
                     for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg})
                       for (size_t count : {size_t{1}, size_t{7}, size_t{1001}, size_t{65537}})
                         for (bool in_place : {false, true}) {
                           ++salt;
                           check_against_fold(comm,
                                              {coll, dtype, op, count, in_place, salt % 4, salt},
                                              {"auto", "hier", "ring", "direct", "twoshot"});
                           if (::testing::Test::HasFailure()) return;
                         }
               },
               {std::chrono::milliseconds(240000), {{"CHORUS_DETERMINISTIC", "1"}}, {}});
}

// Cyclic placement over two "hosts": the ring, chain and tree algorithms run over the grouped
// ring (0 2 1 3) across the composite transport (shm within a host, UCX between).
TEST(OneMachine, CyclicHostsCollectiveMatrix) {
  const auto cases = matrix(4);
  run_on_hosts(nullptr, {0, 1, 0, 1},
               [&](Communicator& comm) {
                 EXPECT_EQ(comm.ring_order(), (std::vector<int>{0, 2, 1, 3}));
                 run_cases(comm, cases);
               },
               {std::chrono::milliseconds(240000), {}, {}});
}

TEST(OneMachine, PeerDeathIsNamedOverUcx) {
  HostRunOptions o;
  o.may_fail = {1};
  o.deadline = std::chrono::milliseconds(60000);
  o.env = {{"CHORUS_TRANSPORT", "ucx"}};
  run_on_hosts(
      nullptr, {0, 0, 0}, [](Communicator& comm) { peer_death_body(comm, 1); }, o);
}

TEST(OneMachine, LastMessagesArriveAfterTheSenderLeftOverUcx) {
  HostRunOptions o;
  o.env = {{"CHORUS_TRANSPORT", "ucx"}};
  run_on_hosts(nullptr, {0, 0, 0}, last_message_body, o);
}

TEST(OneMachine, StoppingEarlyIsNamedOverUcx) {
  HostRunOptions o;
  o.env = {{"CHORUS_TRANSPORT", "ucx"}};
  run_on_hosts(nullptr, {0, 0}, stop_early_body, o);
}

TEST(OneMachine, MismatchIsNamedOverUcx) {
  HostRunOptions o;
  o.env = {{"CHORUS_TRANSPORT", "ucx"}};
  run_on_hosts(
      nullptr, {0, 1},
      [](Communicator& comm) {
        std::vector<float> buf(100, 1.0f);
        try {
          if (comm.rank() == 0)
            comm.all_reduce(buf.data(), buf.data(), 100, DataType::kF32, ReduceOp::kSum);
          else
            comm.all_reduce(buf.data(), buf.data(), 100, DataType::kF32, ReduceOp::kMax);
          ADD_FAILURE() << "mismatched all-reduces succeeded";
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::kMismatch) << e.what();
        }
      },
      o);
}

// Mismatched 16 MiB all-reduces: each rank's payload is a rendezvous its peer never takes. Both
// fail naming the mismatch, within a few seconds, and nothing touches the freed buffers after.
TEST(OneMachine, LargeMismatchOverUcxStopsItsTransfers) {
  HostRunOptions o;
  o.env = {{"CHORUS_TRANSPORT", "ucx"}};
  run_on_hosts(
      nullptr, {0, 1},
      [](Communicator& comm) {
        const auto start = std::chrono::steady_clock::now();
        {
          std::vector<float> buf(size_t{4} << 20, 1.0f);
          comm.set_algorithm("direct");
          try {
            comm.all_reduce(buf.data(), buf.data(), buf.size(), DataType::kF32,
                            comm.rank() == 0 ? ReduceOp::kSum : ReduceOp::kMax);
            ADD_FAILURE() << "mismatched all-reduces succeeded";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::kMismatch) << e.what();
          }
        }  // the buffer is gone: a transfer still running would write into freed memory
        std::vector<float> other(size_t{4} << 20, 2.0f);
        ::usleep(200'000);
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
        EXPECT_EQ(other[12345], 2.0f);
      },
      o);
}

TEST(OneMachine, TransportChoice) {
  run_on_hosts(nullptr, {0, 0, 1, 1}, [](Communicator& comm) {
    // Ranks span two hosts, two on each: hierarchical past one-shot sizes. The cost model prices
    // every algorithm across hosts (a flat one's every term on the network, hier's split between
    // the host and the network), and hier is the cheapest.
    EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 64 << 20), "hier");
    EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, 8), "direct");
    double hier_us = -1, cheapest_us = -1;
    for (const AlgorithmEstimate& e : comm.explain(Collective::kAllReduce, 64 << 20)) {
      EXPECT_GT(e.predicted_us, 0) << e.algorithm << ": no prediction across hosts";
      EXPECT_EQ(e.chosen, e.algorithm == "hier") << e.algorithm;
      if (e.algorithm == "hier") hier_us = e.predicted_us;
      if (cheapest_us < 0 || e.predicted_us < cheapest_us) cheapest_us = e.predicted_us;
    }
    EXPECT_EQ(hier_us, cheapest_us);
    std::vector<int32_t> v(10, comm.rank());
    comm.all_reduce(v.data(), v.data(), 10, DataType::kI32, ReduceOp::kSum);
    EXPECT_EQ(v[9], 0 + 1 + 2 + 3);
  });
}

}  // namespace
}  // namespace chorus::testing
