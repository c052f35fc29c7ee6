#include "multiproc.h"

#include <arpa/inet.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "chorus/launch_env.h"
#include "chorus/store.h"
#include "exchange.h"
#include "transport/factory.h"

namespace chorus::testing {
namespace {

std::string fresh_job_id() {
  static std::atomic<int> counter{0};
  std::random_device rd;
  return "t" + std::to_string(getpid()) + "x" + std::to_string(counter++) + "r" +
         std::to_string(rd() % 100000);
}

int listen_loopback(int* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 128) != 0) {
    close(fd);
    return -1;
  }
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace

std::string run_processes(int world_size, const std::function<void(int rank)>& body,
                          const RunOptions& options) {
  const std::string job = options.job_id.empty() ? fresh_job_id() : options.job_id;
  int port = 0;
  const int listen_fd = listen_loopback(&port);
  if (listen_fd < 0) {
    ADD_FAILURE() << "cannot listen on loopback";
    return job;
  }
  fflush(stdout);
  fflush(stderr);
  std::vector<pid_t> pids(world_size, -1);
  for (int r = 0; r < world_size; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("CHORUS_RANK", std::to_string(r).c_str(), 1);
      setenv("CHORUS_WORLD_SIZE", std::to_string(world_size).c_str(), 1);
      setenv("CHORUS_LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("CHORUS_LOCAL_WORLD_SIZE", std::to_string(world_size).c_str(), 1);
      setenv("CHORUS_MASTER_ADDR", "127.0.0.1", 1);
      setenv("CHORUS_MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("CHORUS_JOB_ID", job.c_str(), 1);
      for (const auto& [k, v] : options.env) setenv(k.c_str(), v.c_str(), 1);
      if (r == 0) {
        int fd = dup(listen_fd);  // dup clears CLOEXEC
        setenv("CHORUS_STORE_FD", std::to_string(fd).c_str(), 1);
      } else {
        unsetenv("CHORUS_STORE_FD");
      }
      close(listen_fd);
      int code = 0;
      try {
        // Capture this rank's assertion failures here (the parent's gtest state, copied by
        // fork, must neither hide nor pre-fail them), print them, and turn them into the exit
        // status.
        ::testing::TestPartResultArray failures;
        {
          ::testing::ScopedFakeTestPartResultReporter all_threads(
              ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ALL_THREADS, &failures);
          ::testing::ScopedFakeTestPartResultReporter this_thread(
              ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD,
              &failures);
          body(r);
        }
        for (int i = 0; i < failures.size(); ++i) {
          const auto& f = failures.GetTestPartResult(i);
          if (!f.failed()) continue;
          fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", r, f.file_name() ? f.file_name() : "?",
                  f.line_number(), f.message());
          code = 1;
        }
      } catch (const std::exception& e) {
        fprintf(stderr, "[rank %d] uncaught exception: %s\n", r, e.what());
        code = 2;
      } catch (...) {
        fprintf(stderr, "[rank %d] uncaught non-standard exception\n", r);
        code = 2;
      }
      fflush(stdout);
      fflush(stderr);
      _exit(code);
    }
    pids[r] = pid;
  }
  close(listen_fd);

  const auto deadline = std::chrono::steady_clock::now() + options.deadline;
  int alive = world_size;
  std::vector<int> status(world_size, 0);
  while (alive > 0) {
    for (int r = 0; r < world_size; ++r) {
      if (pids[r] < 0) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        pids[r] = -1;
        --alive;
      }
    }
    if (alive == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::string hung;
      for (int r = 0; r < world_size; ++r) {
        if (pids[r] < 0) continue;
        hung += " " + std::to_string(r);
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
        pids[r] = -1;
      }
      ADD_FAILURE() << "ranks" << hung << " still running after "
                    << options.deadline.count() / 1000.0 << " s: killed (a hang)";
      return job;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int r = 0; r < world_size; ++r) {
    if (std::find(options.may_fail.begin(), options.may_fail.end(), r) != options.may_fail.end())
      continue;
    if (WIFSIGNALED(status[r]))
      ADD_FAILURE() << "rank " << r << " died by signal " << WTERMSIG(status[r]);
    else if (WEXITSTATUS(status[r]) != 0)
      ADD_FAILURE() << "rank " << r << " failed (exit code " << WEXITSTATUS(status[r]) << ")";
  }
  return job;
}

std::string run_ranks(int world_size, const std::function<void(Communicator&)>& body,
                      const RunOptions& options) {
  return run_processes(
      world_size,
      [&](int rank) {
        if (options.before_connect) options.before_connect(rank);
        Communicator comm = Communicator::from_env();
        EXPECT_EQ(comm.rank(), rank);
        EXPECT_EQ(comm.size(), world_size);
        body(comm);
      },
      options);
}

void run_wired(int n, const std::function<void(int, transport::Wiring&, Exchange&)>& body,
               const RunOptions& options) {
  run_processes(
      n,
      [&](int rank) {
        if (options.before_connect) options.before_connect(rank);
        const LaunchEnv env = detect_launch_env();
        std::unique_ptr<TcpStoreServer> server;
        if (rank == 0) server = TcpStoreServer::adopt(*env.store_fd);
        auto base = std::make_shared<TcpStore>(env.master_addr, env.master_port);
        PrefixStore store(base, "wired/");
        const auto timeout = std::chrono::milliseconds(30000);
        transport::Wiring w =
            transport::connect(rank, n, store, "/chorus-" + env.job_id + "-wired", timeout);
        Exchange ex(*w.transport, rank, n, WaitPolicy::for_ranks(n, w.host_cpus));
        body(rank, w, ex);
        store.set("done/" + std::to_string(rank), "1");
        std::vector<std::string> keys;
        for (int p = 0; p < n; ++p) keys.push_back("done/" + std::to_string(p));
        store.wait(keys, timeout);
        if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      },
      options);
}

}  // namespace chorus::testing
