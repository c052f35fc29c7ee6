// Communicators made again and side by side, in real processes: from_env() under the variables
// of chorus-run, torchrun, Slurm and mpirun, and the explicit constructor on one store. Each rank
// makes three communicators one after another (a rank may start its next one while another still
// tears down the last), then two that live side by side, and checks an all-reduce on each.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "chorus/communicator.h"
#include "chorus/launch_env.h"
#include "multiproc.h"

namespace chorus::testing {
namespace {

constexpr int kRanks = 3;
constexpr int kRounds = 3;

// The sum of all ranks' `rank + offset` as one all-reduce sees it.
void check_all_reduce(Communicator& comm, int offset) {
  float v = static_cast<float>(comm.rank() + offset);
  comm.all_reduce(&v, &v, 1, DataType::kF32, ReduceOp::kSum);
  EXPECT_EQ(v, static_cast<float>(comm.size() * (comm.size() - 1) / 2 + comm.size() * offset));
}

void make_again_and_side_by_side(int rank) {
  for (int round = 0; round < kRounds; ++round) {
    Communicator comm = Communicator::from_env();
    ASSERT_EQ(comm.rank(), rank);
    ASSERT_EQ(comm.size(), kRanks);
    check_all_reduce(comm, round);
  }
  Communicator a = Communicator::from_env();
  Communicator b = Communicator::from_env();
  check_all_reduce(a, 10);
  check_all_reduce(b, 20);
  check_all_reduce(a, 30);
}

// A loopback port that was free a moment ago.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Turns the chorus-run environment run_processes() gives a rank into `launcher`'s, with the store
// at `port`. Those launchers hand rank 0 no socket: it binds the port itself (the others are
// refused and retry until it does), so the inherited socket is closed unused.
void become(const std::string& launcher, int rank, int port) {
  if (const char* fd = std::getenv("CHORUS_STORE_FD")) ::close(std::atoi(fd));
  for (const char* name :
       {"CHORUS_RANK", "CHORUS_WORLD_SIZE", "CHORUS_LOCAL_RANK", "CHORUS_LOCAL_WORLD_SIZE",
        "CHORUS_MASTER_ADDR", "CHORUS_MASTER_PORT", "CHORUS_STORE_FD", "CHORUS_JOB_ID"})
    ::unsetenv(name);
  const std::string r = std::to_string(rank), n = std::to_string(kRanks);
  auto set = [](const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); };
  set("MASTER_PORT", std::to_string(port));
  if (launcher == "torchrun") {
    set("RANK", r), set("WORLD_SIZE", n), set("LOCAL_RANK", r), set("LOCAL_WORLD_SIZE", n);
    set("MASTER_ADDR", "127.0.0.1");
  } else if (launcher == "slurm") {
    set("SLURM_PROCID", r), set("SLURM_NTASKS", n), set("SLURM_LOCALID", r);
    set("SLURM_NTASKS_PER_NODE", n);
  } else if (launcher == "mpirun") {
    set("OMPI_COMM_WORLD_RANK", r), set("OMPI_COMM_WORLD_SIZE", n);
    set("OMPI_COMM_WORLD_LOCAL_RANK", r), set("OMPI_COMM_WORLD_LOCAL_SIZE", n);
  }
}

RunOptions bounded() {
  RunOptions options;
  options.deadline = std::chrono::seconds(60);
  options.env["CHORUS_TIMEOUT"] = "20";
  return options;
}

TEST(Lifecycle, FromEnvAgainAndSideBySideUnderChorusRun) {
  run_processes(
      kRanks, [](int rank) { make_again_and_side_by_side(rank); }, bounded());
}

TEST(Lifecycle, FromEnvAgainAndSideBySideUnderOtherLaunchers) {
  for (const char* launcher : {"torchrun", "slurm", "mpirun"}) {
    SCOPED_TRACE(launcher);
    const int port = free_port();
    run_processes(
        kRanks,
        [&](int rank) {
          become(launcher, rank, port);
          const LaunchEnv env = detect_launch_env();
          ASSERT_EQ(env.launcher, launcher == std::string("mpirun") ? "openmpi" : launcher);
          make_again_and_side_by_side(rank);
        },
        bounded());
  }
}

TEST(Lifecycle, ExplicitConstructorAgainOnOneStore) {
  run_processes(
      kRanks,
      [](int rank) {
        const LaunchEnv env = detect_launch_env();
        std::unique_ptr<TcpStoreServer> server;
        if (rank == 0) server = TcpStoreServer::adopt(*env.store_fd);
        auto store = std::make_shared<TcpStore>(env.master_addr, env.master_port);
        for (int round = 0; round < kRounds; ++round) {
          Communicator comm(rank, kRanks, store);
          check_all_reduce(comm, round);
        }
        {
          Communicator a(rank, kRanks, store);
          Communicator b(rank, kRanks, store);
          check_all_reduce(b, 1);
          check_all_reduce(a, 2);
        }
        // Rank 0 serves the store: it stays until everyone is done with it.
        store->set("done/" + std::to_string(rank), "1");
        store->wait({"done/0", "done/1", "done/2"}, std::chrono::seconds(20));
        if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      },
      bounded());
}

}  // namespace
}  // namespace chorus::testing
