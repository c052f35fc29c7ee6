// Topology exchange between real processes: each rank loads a different fixture, posing as a
// different host, and every rank must end with the same picture of the job.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "../comm/multiproc.h"
#include "chorus/error.h"
#include "chorus/in_process_store.h"
#include "chorus/store.h"
#include "chorus/topo/discover.h"
#include "chorus/topo/placement.h"
#include "chorus/topo/ring_order.h"
#include "chorus/topology_exchange.h"
#include "fixtures.h"

namespace chorus::topo {
namespace {

using namespace testing;

// Ranks 0-1 on the DGX-like host, 2-3 on the 2-socket CPU host.
const std::vector<std::string> kHostOfRank = {kDgx, kDgx, kCpu2, kCpu2};

TEST(Exchange, AllGatherOverACommunicator) {
  chorus::testing::run_ranks(4, [](Communicator& comm) {
    const Topology mine = load_xml(fixture_path(kHostOfRank[static_cast<size_t>(comm.rank())]));
    const std::vector<Topology> all = all_gather_topologies(comm, mine);
    ASSERT_EQ(all.size(), 4u);
    for (size_t r = 0; r < all.size(); ++r)
      EXPECT_EQ(serialize(all[r]), serialize(fixture(kHostOfRank[r]))) << "rank " << r;

    const JobHosts job = group_by_host(all);
    ASSERT_EQ(job.hosts.size(), 2u);
    EXPECT_EQ(job.host_of_rank, (std::vector<int>{0, 0, 1, 1}));
    EXPECT_EQ(job.local_rank, (std::vector<int>{0, 1, 0, 1}));

    // Every rank derives the same ring from the gathered topologies.
    std::vector<Endpoint> members;
    for (int r = 0; r < 4; ++r) {
      const Topology& host =
          job.hosts[static_cast<size_t>(job.host_of_rank[static_cast<size_t>(r)])];
      const Slot slot =
          host_slots(host, 0, 2)[static_cast<size_t>(job.local_rank[static_cast<size_t>(r)])];
      members.push_back({job.host_of_rank[static_cast<size_t>(r)], slot.node});
    }
    std::vector<int32_t> ring;
    for (int r : ring_order(members, job.hosts)) ring.push_back(r);
    std::vector<int32_t> rings(4 * ring.size());
    comm.all_gather(ring.data(), rings.data(), ring.size(), DataType::kI32);
    for (int r = 1; r < 4; ++r)
      EXPECT_TRUE(std::equal(ring.begin(), ring.end(), rings.begin() + r * 4))
          << "rank " << r << " differs";
  });
}

TEST(Exchange, ThroughATcpStoreBetweenProcesses) {
  TcpStoreServer server("127.0.0.1", 0);
  const int port = server.port();
  const int world = 4;
  std::vector<pid_t> children;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      try {
        TcpStore store("127.0.0.1", port, Millis(10000));
        const Topology mine = load_xml(fixture_path(kHostOfRank[static_cast<size_t>(rank)]));
        const std::vector<Topology> all =
            exchange_topologies(store, rank, world, mine, Millis(20000));
        for (int r = 0; r < world; ++r)
          if (all[static_cast<size_t>(r)].hostname !=
              fixture(kHostOfRank[static_cast<size_t>(r)]).hostname)
            code = 3;
        if (group_by_host(all).hosts.size() != 2) code = 4;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        code = 2;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (size_t i = 0; i < children.size(); ++i) {
    int status = 0;
    pid_t done = 0;
    while ((done = ::waitpid(children[i], &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline)
      ::usleep(10000);
    if (done == 0) {
      ::kill(children[i], SIGKILL);
      ::waitpid(children[i], &status, 0);
      ADD_FAILURE() << "rank " << i << " hung";
      continue;
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << i << " status " << status;
  }
}

TEST(Exchange, AMissingRankTimesOutNamingIt) {
  InProcessStore store;
  try {
    exchange_topologies(store, 0, 2, fixture(kCpu1), Millis(200));
    FAIL() << "expected a timeout";
  } catch (const Timeout& e) {
    EXPECT_NE(e.message().find("topo/1"), std::string::npos) << e.message();
  }
  EXPECT_THROW(exchange_topologies(store, 2, 2, fixture(kCpu1), Millis(10)), InvalidArgument);
}

}  // namespace
}  // namespace chorus::topo
