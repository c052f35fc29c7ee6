// Every wait obeys the deadline, at the edges of a job too, in real processes: huge and infinite
// timeouts; rank 0 (the store's host) stopped or killed mid-job and during set-up; a silent
// listener or nobody on the master port; a peer that dies during set-up; two jobs with one job id;
// an absurd world size. Each test bounds how long the ranks take to learn of it and to tear down.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "chorus/communicator.h"
#include "chorus/in_process_store.h"
#include "chorus/launch_env.h"
#include "error_helpers.h"
#include "multiproc.h"
#include "transport/shm/shm_layout.h"

namespace chorus::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// What the ranks of one run tell each other and the test.
struct Shared {
  std::atomic<pid_t> pid[4] = {};
  std::atomic<int> finished{0};
};

// A loopback socket that listens and never answers (a stranger on the master port, or a stopped
// rank 0: the kernel still completes connections).
struct SilentListener {
  int fd = -1;
  int port = 0;
  SilentListener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(::listen(fd, 16), 0);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  ~SilentListener() { ::close(fd); }
};

// This rank of run_processes() becomes rank `rank` of `world` with its store at `port` (and no
// socket to serve).
void reconnect_to(int port, int rank, int world) {
  if (const char* fd = std::getenv("CHORUS_STORE_FD")) ::close(std::atoi(fd));
  ::unsetenv("CHORUS_STORE_FD");
  ::setenv("CHORUS_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("CHORUS_LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("CHORUS_WORLD_SIZE", std::to_string(world).c_str(), 1);
  ::setenv("CHORUS_LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
  ::setenv("CHORUS_MASTER_PORT", std::to_string(port).c_str(), 1);
}

// Sends `signal` to this whole process after `delay` (from another thread, while this one is
// inside a set-up).
void signal_self_after(std::chrono::milliseconds delay, int signal) {
  std::thread([delay, signal] {
    std::this_thread::sleep_for(delay);
    ::kill(::getpid(), signal);
  }).detach();
}

// ---- timeouts
// ------------------------------------------------------------------------------------

// CHORUS_TIMEOUT=1e10 once failed the first operation at once (the deadline overflowed) and inf
// reported "-9.22e+15 s"; both, and 0, now mean no deadline. A late rank is simply waited for.
TEST(Deadline, HugeAndInfiniteTimeoutsMeanNoDeadline) {
  for (const char* value : {"1e10", "inf", "0"}) {
    SCOPED_TRACE(value);
    RunOptions options;
    options.env["CHORUS_TIMEOUT"] = value;
    options.deadline = 30s;
    run_ranks(
        2,
        [](Communicator& comm) {
          float v = 1;
          if (comm.rank() == 1) std::this_thread::sleep_for(300ms);
          comm.all_reduce(&v, &v, 1, DataType::kF32, ReduceOp::kSum);
          EXPECT_EQ(v, 2.0f);
          comm.set_timeout(std::chrono::milliseconds::max());
          comm.barrier();
        },
        options);
  }
  CommOptions never;
  never.timeout = std::chrono::milliseconds::max();
  Communicator single(0, 1, std::make_shared<InProcessStore>(), never);
  single.barrier();
}

TEST(Deadline, MalformedTimeoutNamesTheKnob) {
  RunOptions options;
  options.env["CHORUS_TIMEOUT"] = "-5";
  options.deadline = 20s;
  run_processes(
      1,
      [](int) {
        auto e = error_of([] { Communicator::from_env(); });
        ASSERT_TRUE(e);
        EXPECT_EQ(e->kind(), ErrorKind::kInvalidArgument) << e->what();
        EXPECT_TRUE(contains(e->what(), "CHORUS_TIMEOUT='-5'")) << e->what();
      },
      options);
}

// ---- the store's host stopped or killed mid-job ------------------------------------------------

// Rank 0 stops (SIGSTOP) in the middle of a loop of all-reduces. The others fail at the timeout
// naming rank 0, and their teardown, which would wait for the store, ends within
// min(timeout, kTeardownBound).
TEST(Deadline, StoppedStoreHostMidJobEndsWithinTimeoutPlusTeardown) {
  constexpr double kTimeout = 1.0;
  SharedBetweenRanks<Shared> shared;
  RunOptions options;
  options.env["CHORUS_TIMEOUT"] = "1";
  options.may_fail = {0};
  options.deadline = 20s;
  run_processes(
      3,
      [&](int rank) {
        shared->pid[rank] = ::getpid();
        std::optional<Communicator> comm(Communicator::from_env());
        float v = 1;
        for (int i = 0; i < 5; ++i) comm->all_reduce(&v, &v, 1, DataType::kF32, ReduceOp::kSum);
        if (rank == 0) {
          ::raise(SIGSTOP);  // resumed only to be killed
          ::pause();
        }
        const auto start = Clock::now();
        auto e = error_of([&] {
          for (;;) comm->all_reduce(&v, &v, 1, DataType::kF32, ReduceOp::kSum);
        });
        const double failed_after = seconds_since(start);
        ASSERT_TRUE(e);
        EXPECT_TRUE(contains(e->what(), "rank 0")) << e->what();
        const auto teardown_start = Clock::now();
        comm.reset();
        const double teardown = seconds_since(teardown_start);
        std::fprintf(stderr, "[rank %d] failed after %.2f s, teardown %.2f s\n", rank, failed_after,
                     teardown);
        EXPECT_LT(failed_after, kTimeout + 1.0);
        EXPECT_LT(teardown, std::min(kTimeout, 2.0) + 0.5);
        if (++shared->finished == 2) ::kill(shared->pid[0], SIGKILL);
      },
      options);
}

// Rank 0 is killed mid-job: the others learn it within milliseconds, and the store being gone
// costs their teardown nothing.
TEST(Deadline, KilledStoreHostMidJobIsNamedAtOnce) {
  RunOptions options;
  options.env["CHORUS_TIMEOUT"] = "10";
  options.may_fail = {0};
  options.deadline = 20s;
  run_processes(
      3,
      [&](int rank) {
        std::optional<Communicator> comm(Communicator::from_env());
        float v = 1;
        for (int i = 0; i < 3; ++i) comm->all_reduce(&v, &v, 1, DataType::kF32, ReduceOp::kSum);
        if (rank == 0) ::kill(::getpid(), SIGKILL);
        const auto start = Clock::now();
        auto e = error_of([&] {
          for (;;) comm->all_reduce(&v, &v, 1, DataType::kF32, ReduceOp::kSum);
        });
        const double failed_after = seconds_since(start);
        ASSERT_TRUE(e);
        EXPECT_EQ(e->peer(), 0) << e->what();
        const auto teardown_start = Clock::now();
        comm.reset();
        const double teardown = seconds_since(teardown_start);
        std::fprintf(stderr, "[rank %d] failed after %.2f s, teardown %.2f s\n", rank, failed_after,
                     teardown);
        EXPECT_LT(failed_after, 2.0);
        EXPECT_LT(teardown, 0.5);
      },
      options);
}

// ---- the store's host stopped or killed during set-up ------------------------------------------

// Rank 2 never comes; rank 0 is killed while rank 1 waits for rank 2 in set-up. Rank 1 fails at
// once, naming rank 0, instead of at its 10 s deadline.
TEST(Deadline, KilledStoreHostDuringSetUpIsNamedAtOnce) {
  RunOptions options;
  options.env["CHORUS_TIMEOUT"] = "10";
  options.may_fail = {0};
  options.deadline = 20s;
  run_processes(
      3,
      [](int rank) {
        if (rank == 2) return;
        if (rank == 0) signal_self_after(300ms, SIGKILL);
        const auto start = Clock::now();
        auto e = error_of([] { Communicator::from_env(); });
        ASSERT_TRUE(e);
        std::fprintf(stderr, "[rank %d] set-up failed after %.2f s: %s\n", rank,
                     seconds_since(start), e->what());
        EXPECT_EQ(e->kind(), ErrorKind::kPeerFailure) << e->what();
        EXPECT_TRUE(contains(e->what(), "rank 0")) << e->what();
        EXPECT_LT(seconds_since(start), 2.0);
      },
      options);
}

// Rank 0 stops during set-up: rank 1 names it ("does not answer") by its own deadline (1 s) plus
// SetupStore::kReplyGrace.
TEST(Deadline, StoppedStoreHostDuringSetUpIsNamedByTheDeadline) {
  SharedBetweenRanks<Shared> shared;
  RunOptions options;
  options.env["CHORUS_TIMEOUT"] = "1";
  options.may_fail = {0};
  options.deadline = 20s;
  run_processes(
      3,
      [&](int rank) {
        shared->pid[rank] = ::getpid();
        if (rank == 2) return;
        if (rank == 0) signal_self_after(300ms, SIGSTOP);
        const auto start = Clock::now();
        auto e = error_of([] { Communicator::from_env(); });
        ASSERT_TRUE(e);
        const double failed_after = seconds_since(start);
        std::fprintf(stderr, "[rank %d] set-up failed after %.2f s: %s\n", rank, failed_after,
                     e->what());
        EXPECT_TRUE(contains(e->what(), "rank 0, which hosts the bootstrap store")) << e->what();
        EXPECT_TRUE(contains(e->what(), "does not answer")) << e->what();
        EXPECT_LT(failed_after, 1.0 + 0.5 + 0.5);
        ::kill(shared->pid[0], SIGKILL);
      },
      options);
}

// ---- the master port ---------------------------------------------------------------------------

// A process on the master port that accepts and never answers: set-up fails at the timeout,
// naming the port's holder as not answering.
TEST(Deadline, SilentListenerOnTheMasterPortFailsAtTheTimeout) {
  SilentListener silent;
  RunOptions options;
  options.env["CHORUS_TIMEOUT"] = "1";
  options.deadline = 20s;
  run_processes(
      1,
      [&](int) {
        reconnect_to(silent.port, 1, 2);
        const auto start = Clock::now();
        auto e = error_of([] { Communicator::from_env(); });
        ASSERT_TRUE(e);
        const double failed_after = seconds_since(start);
        EXPECT_TRUE(contains(e->what(), "does not answer")) << e->what();
        EXPECT_TRUE(contains(e->what(), "127.0.0.1:" + std::to_string(silent.port))) << e->what();
        EXPECT_GE(failed_after, 0.9);
        EXPECT_LT(failed_after, 2.5);
      },
      options);
}

// Connecting obeys CHORUS_TIMEOUT (it once retried for a fixed 30 s).
TEST(Deadline, ConnectingGivesUpAtTheTimeout) {
  int port = 0;
  {
    SilentListener taken;  // a port that was free a moment ago; closed, nobody listens
    port = taken.port;
  }
  RunOptions options;
  options.env["CHORUS_TIMEOUT"] = "1";
  options.deadline = 20s;
  run_processes(
      1,
      [&](int) {
        reconnect_to(port, 1, 2);
        const auto start = Clock::now();
        auto e = error_of([] { Communicator::from_env(); });
        ASSERT_TRUE(e);
        EXPECT_TRUE(contains(e->what(), "cannot reach the bootstrap store")) << e->what();
        EXPECT_GE(seconds_since(start), 0.9);
        EXPECT_LT(seconds_since(start), 2.5);
      },
      options);
}

// ---- a peer that dies or fails during set-up
// -----------------------------------------------------

// Rank 2 is killed while it waits in set-up for a slow rank 1. Once rank 0 needs something
// rank 2 never published, it names rank 2 as dead at once instead of at its 10 s deadline.
TEST(Deadline, PeerKilledDuringSetUpIsNamedWithoutWaitingForTheTimeout) {
  RunOptions options;
  options.env["CHORUS_TIMEOUT"] = "10";
  options.may_fail = {1, 2};
  options.deadline = 30s;
  run_processes(
      3,
      [](int rank) {
        if (rank == 1) std::this_thread::sleep_for(600ms);
        if (rank == 2) signal_self_after(200ms, SIGKILL);
        const auto start = Clock::now();
        auto e = error_of([] { Communicator::from_env(); });
        ASSERT_TRUE(e);
        std::fprintf(stderr, "[rank %d] set-up failed after %.2f s: %s\n", rank,
                     seconds_since(start), e->what());
        if (rank != 0) return;
        EXPECT_EQ(e->kind(), ErrorKind::kPeerFailure) << e->what();
        EXPECT_EQ(e->peer(), 2) << e->what();
        EXPECT_TRUE(contains(e->what(), "rank 2 (pid")) << e->what();
        EXPECT_TRUE(contains(e->what(), "died during set-up")) << e->what();
        EXPECT_LT(seconds_since(start), 3.0);
      },
      options);
}

// ---- two jobs with one job id; an absurd world size
// ----------------------------------------------

// A segment of this job's names exists already (another job with the same CHORUS_JOB_ID): the
// error says so, with the pid that made it, instead of a bare "shm_open: File exists"; the other
// rank learns of it from rank 0's report at once.
TEST(Deadline, ReusedJobIdNamesTheCollision) {
  const std::string job = "dupjob" + std::to_string(::getpid());
  const std::string name = "/chorus-" + job + "-w1-0";
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  transport::shm::SegmentHeader header{};
  header.magic = transport::shm::kSegmentMagic;
  header.pid = ::getpid();
  ASSERT_EQ(::pwrite(fd, &header, sizeof header, 0), static_cast<ssize_t>(sizeof header));
  ::close(fd);

  RunOptions options;
  options.env["CHORUS_TIMEOUT"] = "10";
  options.job_id = job;
  options.deadline = 20s;
  const auto start = Clock::now();
  run_processes(
      2,
      [&](int rank) {
        auto e = error_of([] { Communicator::from_env(); });
        ASSERT_TRUE(e);
        EXPECT_TRUE(contains(e->what(), "/dev/shm" + name + " already exists")) << e->what();
        EXPECT_TRUE(
            contains(e->what(), "pid " + std::to_string(::getppid()) + ", which is running"))
            << e->what();
        EXPECT_TRUE(contains(e->what(), "CHORUS_JOB_ID")) << e->what();
        if (rank == 1) EXPECT_TRUE(contains(e->what(), "rank 0 failed to set up")) << e->what();
      },
      options);
  EXPECT_LT(seconds_since(start), 5.0);
  ::shm_unlink(name.c_str());
}

TEST(Deadline, AbsurdWorldSizeIsRefusedBeforeAllocating) {
  auto e = error_of([] { Communicator(0, 2147483647, std::make_shared<InProcessStore>()); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(contains(e->what(), "world_size 2147483647 is out of range")) << e->what();
  RunOptions options;
  options.deadline = 20s;
  run_processes(
      1,
      [](int) {
        ::setenv("CHORUS_WORLD_SIZE", "2147483647", 1);
        auto e = error_of([] { Communicator::from_env(); });
        ASSERT_TRUE(e);
        EXPECT_TRUE(contains(e->what(), "CHORUS_WORLD_SIZE='2147483647'")) << e->what();
      },
      options);
}

}  // namespace
}  // namespace chorus::testing
