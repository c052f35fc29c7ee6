// chorus-run end to end: the real launcher runs rank_probe (see rank_probe.cc for its actions).

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kChorusRun = CHORUS_RUN_BIN;
constexpr const char* kProbe = RANK_PROBE_BIN;
constexpr const char* kTune = CHORUS_TUNE_BIN;
constexpr const char* kCommProbe = COMM_PROBE_BIN;

struct Result {
  int exit_code = -1;  // 128 + signal when chorus-run itself was killed
  std::string out;
  std::string err;
  double seconds = 0;  // from start to exit
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// chorus-run started in the background, its stdout and stderr captured. The environment is the
// test's minus every CHORUS_* variable but the suite's CHORUS_COST_PROBE (tests/CMakeLists.txt:
// a job's first communicator would otherwise probe the host, seconds under a sanitizer, inside
// the timings these tests bound), plus `env`.
class Launch {
 public:
  explicit Launch(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv_strings = {kChorusRun};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e)
      if (const std::string_view v(*e);
          !v.starts_with("CHORUS_") || v.starts_with("CHORUS_COST_PROBE="))
        env_strings.emplace_back(*e);
    env_strings.insert(env_strings.end(), env.begin(), env.end());

    int out[2], err[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    auto argv = c_strings(argv_strings);
    auto envp = c_strings(env_strings);
    const int rc = ::posix_spawn(&pid_, kChorusRun, &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(rc, 0) << "cannot start " << kChorusRun;
    ::close(out[1]);
    ::close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
    start_ = Clock::now();
  }

  ~Launch() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) ::close(out_fd_);
    if (err_fd_ >= 0) ::close(err_fd_);
  }

  pid_t pid() const { return pid_; }

  // Copies output until `done(stdout so far)` holds; false after `timeout`.
  bool wait_for_stdout(const std::function<bool(const std::string&)>& done,
                       Clock::duration timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!done(result_.out)) {
      if (Clock::now() > deadline || (out_fd_ < 0 && err_fd_ < 0)) return false;
      pump(20);
    }
    return true;
  }

  // Waits for chorus-run to exit and collects the rest of its output. On timeout it is killed and
  // the test fails.
  Result finish(Clock::duration timeout = 20s) {
    const auto deadline = start_ + timeout;
    while (!reaped_) {
      pump(10);
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        result_.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
        result_.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      } else if (Clock::now() > deadline) {
        ADD_FAILURE() << "chorus-run did not exit in time; stderr so far:\n" << result_.err;
        ::kill(pid_, SIGKILL);
      }
    }
    // Ranks inherit the pipes when output is not tagged; they must all be gone too.
    const auto output_deadline = Clock::now() + 2s;
    while ((out_fd_ >= 0 || err_fd_ >= 0) && Clock::now() < output_deadline) pump(20);
    EXPECT_TRUE(out_fd_ < 0 && err_fd_ < 0) << "a rank outlived chorus-run (its pipe is open)";
    return result_;
  }

 private:
  static std::vector<char*> c_strings(std::vector<std::string>& strings) {
    std::vector<char*> out;
    for (std::string& s : strings) out.push_back(s.data());
    out.push_back(nullptr);
    return out;
  }

  void pump(int timeout_ms) {
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    if (::poll(fds, 2, timeout_ms) <= 0) return;
    read_into(fds[0], out_fd_, result_.out);
    read_into(fds[1], err_fd_, result_.err);
  }

  static void read_into(const pollfd& p, int& fd, std::string& sink) {
    if (fd < 0 || p.revents == 0) return;
    char buffer[4096];
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      sink.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      ::close(fd);
      fd = -1;
    }
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  bool reaped_ = false;
  Clock::time_point start_;
  Result result_;
};

Result run(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  return Launch(args, env).finish();
}

// chorus-tune times every algorithm at every size up to --max-bytes: a few seconds per launch,
// many times that under the sanitizers with another test's ranks on the same two cores.
Result run_tune(const std::vector<std::string>& args) { return Launch(args, {}).finish(90s); }

// `chorus-run <launcher_args> rank_probe <probe_args>`
std::vector<std::string> probe_job(std::vector<std::string> launcher_args,
                                   const std::vector<std::string>& probe_args) {
  launcher_args.push_back(kProbe);
  launcher_args.insert(launcher_args.end(), probe_args.begin(), probe_args.end());
  return launcher_args;
}

using EnvByRank = std::map<int, std::map<std::string, std::string>>;

// Parses rank_probe's "rank=<r> NAME=value ..." lines.
EnvByRank parse_env_lines(const std::string& out) {
  EnvByRank env;
  for (const std::string& line : lines_of(out)) {
    if (!line.starts_with("rank=")) continue;
    std::istringstream words(line);
    std::string word;
    words >> word;
    const int rank = std::stoi(word.substr(5));
    EXPECT_EQ(env.count(rank), 0u) << "rank " << rank << " printed twice";
    while (words >> word) {
      const size_t eq = word.find('=');
      env[rank][word.substr(0, eq)] = word.substr(eq + 1);
    }
  }
  return env;
}

bool path_exists(const std::string& path) { return std::filesystem::exists(path); }

// ---- environment ----------------------------------------------------------------------------

TEST(ChorusRun, OneRankGetsItsEnvironment) {
  const Result r = run(probe_job({"-n", "1"}, {"env"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const EnvByRank env = parse_env_lines(r.out);
  ASSERT_EQ(env.size(), 1u) << r.out;
  const auto& e = env.at(0);
  EXPECT_EQ(e.at("CHORUS_RANK"), "0");
  EXPECT_EQ(e.at("CHORUS_WORLD_SIZE"), "1");
  EXPECT_EQ(e.at("CHORUS_LOCAL_RANK"), "0");
  EXPECT_EQ(e.at("CHORUS_LOCAL_WORLD_SIZE"), "1");
  EXPECT_EQ(e.at("CHORUS_NNODES"), "1");
  EXPECT_EQ(e.at("CHORUS_NODE_RANK"), "0");
  EXPECT_EQ(e.at("CHORUS_MASTER_ADDR"), "127.0.0.1");
  EXPECT_GT(std::stoi(e.at("CHORUS_MASTER_PORT")), 0) << "port 0 must become the real port";
  EXPECT_TRUE(std::regex_match(e.at("CHORUS_JOB_ID"), std::regex("[a-z0-9]{12}")))
      << e.at("CHORUS_JOB_ID");
  EXPECT_NE(e.at("CHORUS_STORE_FD"), "<unset>");
}

TEST(ChorusRun, ThreeRanksShareJobAndPort) {
  const Result r = run(probe_job({"-n", "3"}, {"env"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const EnvByRank env = parse_env_lines(r.out);
  ASSERT_EQ(env.size(), 3u) << r.out;
  for (int rank = 0; rank < 3; ++rank) {
    const auto& e = env.at(rank);
    EXPECT_EQ(e.at("CHORUS_RANK"), std::to_string(rank));
    EXPECT_EQ(e.at("CHORUS_LOCAL_RANK"), std::to_string(rank));
    EXPECT_EQ(e.at("CHORUS_WORLD_SIZE"), "3");
    EXPECT_EQ(e.at("CHORUS_LOCAL_WORLD_SIZE"), "3");
    EXPECT_EQ(e.at("CHORUS_MASTER_PORT"), env.at(0).at("CHORUS_MASTER_PORT"));
    EXPECT_EQ(e.at("CHORUS_JOB_ID"), env.at(0).at("CHORUS_JOB_ID"));
    EXPECT_EQ(e.at("CHORUS_STORE_FD") == "<unset>", rank != 0) << "rank " << rank;
  }
}

TEST(ChorusRun, JobIdFromEnvironmentIsKept) {
  const Result r = run(probe_job({"-n", "2"}, {"env"}), {"CHORUS_JOB_ID=given_id-7"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const EnvByRank env = parse_env_lines(r.out);
  ASSERT_EQ(env.size(), 2u);
  for (const auto& [rank, e] : env) EXPECT_EQ(e.at("CHORUS_JOB_ID"), "given_id-7");
}

TEST(ChorusRun, SecondNodeRanksFollowNodeRank) {
  const Result r = run(probe_job({"-n", "3", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                                  "127.0.0.1", "--master-port", "29999"},
                                 {"env", "store-fd"}),
                       {"CHORUS_JOB_ID=twonodes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const EnvByRank env = parse_env_lines(r.out);
  ASSERT_EQ(env.size(), 3u) << r.out;
  for (int local = 0; local < 3; ++local) {
    const auto& e = env.at(3 + local);
    EXPECT_EQ(e.at("CHORUS_RANK"), std::to_string(3 + local));
    EXPECT_EQ(e.at("CHORUS_LOCAL_RANK"), std::to_string(local));
    EXPECT_EQ(e.at("CHORUS_WORLD_SIZE"), "6");
    EXPECT_EQ(e.at("CHORUS_LOCAL_WORLD_SIZE"), "3");
    EXPECT_EQ(e.at("CHORUS_NNODES"), "2");
    EXPECT_EQ(e.at("CHORUS_NODE_RANK"), "1");
    EXPECT_EQ(e.at("CHORUS_MASTER_PORT"), "29999");
    EXPECT_EQ(e.at("CHORUS_JOB_ID"), "twonodes");
    EXPECT_EQ(e.at("CHORUS_STORE_FD"), "<unset>") << "only node 0 hosts the store";
  }
}

// ---- the store socket -------------------------------------------------------------------------

TEST(ChorusRun, StoreSocketGoesToRankZeroOnly) {
  const Result r = run(probe_job({"-n", "3"}, {"store-fd", "env"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const EnvByRank env = parse_env_lines(r.out);
  ASSERT_EQ(env.size(), 3u);
  const std::string port = env.at(0).at("CHORUS_MASTER_PORT");
  EXPECT_NE(r.out.find("store-fd 0 ok port " + port + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("store-fd 1 ok\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("store-fd 2 ok\n"), std::string::npos) << r.out;
}

TEST(ChorusRun, PortInUseIsReported) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));

  const Result r = run(probe_job({"-n", "2", "--master-port", port}, {"env"}));
  ::close(fd);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("port " + port + " is already in use"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "") << "no rank may start";
}

// ---- output -------------------------------------------------------------------------------------

TEST(ChorusRun, TagOutputPrefixesEveryLine) {
  constexpr int kRanks = 3;
  constexpr int kLines = 4;
  const Result r = run(
      probe_job({"-n", std::to_string(kRanks), "--tag-output"}, {"lines", std::to_string(kLines)}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::regex out_line(R"(\[(\d+)\] (out (\d+) \d+|tail (\d+)))");
  const std::regex err_line(R"(\[(\d+)\] err (\d+) \d+)");
  std::set<std::string> seen;
  for (const std::string& line : lines_of(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, out_line)) << "untagged or broken line: '" << line << "'";
    EXPECT_EQ(m[1], m[3].matched ? m[3] : m[4]) << line;
    seen.insert(line);
  }
  EXPECT_EQ(seen.size(), size_t{kRanks * (kLines + 1)}) << r.out;
  for (int rank = 0; rank < kRanks; ++rank) {
    const std::string r_text = std::to_string(rank);
    EXPECT_TRUE(seen.count("[" + r_text + "] out " + r_text + " 0")) << "split line rejoined";
    EXPECT_TRUE(seen.count("[" + r_text + "] tail " + r_text)) << "unterminated line flushed";
  }
  const auto err_lines = lines_of(r.err);
  EXPECT_EQ(err_lines.size(), size_t{kRanks * kLines}) << r.err;
  for (const std::string& line : err_lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, err_line)) << "stderr line: '" << line << "'";
    EXPECT_EQ(m[1], m[2]);
  }
}

TEST(ChorusRun, AllRanksCleanMeansExitZero) {
  const Result r = run(probe_job({"-n", "4"}, {}));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err, "");
}

// ---- failures -----------------------------------------------------------------------------------

TEST(ChorusRun, FirstFailureIsNamedWithItsExitCode) {
  // Rank 2 fails at once; rank 0 fails 300 ms later, inside the grace period; rank 1 never
  // exits and is terminated when the grace period ends.
  constexpr double kGrace = 1.0;
  const Result r = run(probe_job({"-n", "3", "--grace", "1"},
                                 {"exit", "2", "3", "sleep-ms", "300", "exit", "0", "5", "sleep"}));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex(R"(chorus-run: rank 2 \(pid \d+\) failed first: exited with code 3\n)")))
      << r.err;
  EXPECT_NE(r.err.find("rank 0 exited with code 5"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1 killed by signal 15 (SIGTERM)"), std::string::npos) << r.err;
  EXPECT_GE(r.seconds, kGrace);
  EXPECT_LT(r.seconds, kGrace + 2.0);
}

TEST(ChorusRun, FirstFailureBySignalIsNamed) {
  const Result r = run(probe_job({"-n", "2", "--grace", "0.3"}, {"segv", "1", "sleep"}));
  EXPECT_EQ(r.exit_code, 128 + SIGSEGV);
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex(R"(rank 1 \(pid \d+\) failed first: killed by signal 11 \(SIGSEGV\))")))
      << r.err;
  EXPECT_NE(r.err.find("rank 0 killed by signal 15 (SIGTERM)"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 0.3 + 2.0);
}

TEST(ChorusRun, RanksIgnoringSigtermAreKilled) {
  // Rank 0 fails; rank 1 ignores SIGTERM: SIGKILL follows one second after it.
  const Result r =
      run(probe_job({"-n", "2", "--grace", "0.3"}, {"ignore-term", "exit", "0", "4", "sleep"}));
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_NE(r.err.find("rank 1 killed by signal 9 (SIGKILL)"), std::string::npos) << r.err;
  EXPECT_GE(r.seconds, 0.3 + 1.0);
  EXPECT_LT(r.seconds, 0.3 + 1.0 + 2.0);
}

TEST(ChorusRun, GraceComesFromTheEnvironment) {
  const Result r =
      run(probe_job({"-n", "2"}, {"exit", "1", "7", "sleep"}), {"CHORUS_RUN_GRACE=0.2"});
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_LT(r.seconds, 0.2 + 1.5) << "the default grace (3 s) was used";
}

TEST(ChorusRun, SigtermStopsEveryRank) {
  constexpr int kRanks = 3;
  Launch launch(probe_job({"-n", std::to_string(kRanks)}, {"ready", "sleep"}));
  const std::regex ready(R"(ready (\d+) (\d+))");
  auto count_ready = [&](const std::string& out) {
    const auto lines = lines_of(out);
    return std::count_if(lines.begin(), lines.end(),
                         [&](const std::string& l) { return std::regex_match(l, ready); });
  };
  ASSERT_TRUE(launch.wait_for_stdout(
      [&](const std::string& out) { return count_ready(out) == kRanks; }, 10s));
  ASSERT_EQ(::kill(launch.pid(), SIGTERM), 0);
  const auto signalled = Clock::now();
  const Result r = launch.finish();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - signalled).count(), 2.0);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_NE(r.err.find("received SIGTERM"), std::string::npos) << r.err;
  for (const std::string& line : lines_of(r.out)) {
    std::smatch m;
    if (!std::regex_match(line, m, ready)) continue;
    const pid_t pid = std::stoi(m[2]);
    EXPECT_TRUE(::kill(pid, 0) != 0 && errno == ESRCH) << "rank " << m[1] << " survived";
  }
}

// ---- shared-memory hygiene ----------------------------------------------------------------------

TEST(ChorusRun, CrashedJobsShmLitterIsSwept) {
  const std::string job = "sweep" + std::to_string(::getpid());
  const std::string other = "/dev/shm/chorus-other" + std::to_string(::getpid()) + "-keep";
  std::ofstream(other).put('x');
  ASSERT_TRUE(path_exists(other));

  const Result r =
      run(probe_job({"-n", "2", "--grace", "0.3"}, {"shm-litter", "segv", "1", "sleep"}),
          {"CHORUS_JOB_ID=" + job});
  EXPECT_EQ(r.exit_code, 128 + SIGSEGV) << r.err;
  EXPECT_NE(r.out.find("litter /chorus-" + job + "-litter-0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("litter /chorus-" + job + "-litter-1"), std::string::npos) << r.out;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    EXPECT_FALSE(entry.path().filename().string().starts_with("chorus-" + job + "-"))
        << entry.path() << " was left behind";
  EXPECT_TRUE(path_exists(other)) << "another job's segment was removed";
  std::filesystem::remove(other);
}

// ---- whole process trees, and jobs of real chorus ranks ----------------------------------------

// True once `pid` has ended: gone, or a zombie nobody reaped yet (the ranks' grandchildren are
// reaped by init, which a container may not do promptly).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

bool all_gone_within(const std::vector<pid_t>& pids, Clock::duration timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (std::all_of(pids.begin(), pids.end(), process_gone)) return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
}

// "ready <rank> <pid>" lines: the pids.
std::vector<pid_t> ready_pids(const std::string& out) {
  std::vector<pid_t> pids;
  const std::regex ready(R"(ready (\d+) (\d+))");
  for (const std::string& line : lines_of(out)) {
    std::smatch m;
    if (std::regex_match(line, m, ready)) pids.push_back(std::stoi(m[2]));
  }
  return pids;
}

// A rank started through a wrapper (`sh -c "prog; echo"`) runs as a grandchild of chorus-run.
// When chorus-run is killed with SIGKILL, its guard kills the whole process group of each rank:
// the wrapped programs end too, within a second.
TEST(ChorusRun, KilledLauncherTakesWrappedRanksWithIt) {
  constexpr size_t kRanks = 3;
  Launch launch(
      {"-n", std::to_string(kRanks), "sh", "-c", std::string(kProbe) + " ready sleep; echo after"});
  std::vector<pid_t> wrapped;
  ASSERT_TRUE(launch.wait_for_stdout(
      [&](const std::string& out) {
        wrapped = ready_pids(out);
        return wrapped.size() == kRanks;
      },
      10s));
  ASSERT_EQ(::kill(launch.pid(), SIGKILL), 0);
  const auto killed = Clock::now();
  EXPECT_TRUE(all_gone_within(wrapped, 2s)) << "the wrapped ranks outlived chorus-run";
  const double took = std::chrono::duration<double>(Clock::now() - killed).count();
  const Result r = launch.finish();
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  EXPECT_NE(r.err.find("chorus-run-guard: chorus-run (pid " + std::to_string(launch.pid()) +
                       ") ended without stopping its ranks"),
            std::string::npos)
      << r.err;
  std::printf("wrapped ranks gone %.3f s after chorus-run was killed\n", took);
}

// What a rank leaves running in its process group ends with the job.
TEST(ChorusRun, WhatARankLeavesBehindEndsWithTheJob) {
  const Result r =
      run({"-n", "2", "sh", "-c", std::string(kProbe) + " ready sleep & sleep 0.5; echo left"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::vector<pid_t> left = ready_pids(r.out);
  EXPECT_EQ(left.size(), 2u) << r.out;
  EXPECT_TRUE(all_gone_within(left, 2s));
}

// A second chorus-run with the job id of a running one (and the same node rank) is refused at
// once, naming the first; another node rank of the same job may share the id.
TEST(ChorusRun, SecondJobWithTheSameJobIdIsRefused) {
  const std::string id = "same" + std::to_string(::getpid());
  Launch first(probe_job({"-n", "1"}, {"ready", "sleep"}), {"CHORUS_JOB_ID=" + id});
  ASSERT_TRUE(first.wait_for_stdout(
      [](const std::string& out) { return out.find("ready 0") != std::string::npos; }, 10s));
  const Result second = run(probe_job({"-n", "1"}, {"env"}), {"CHORUS_JOB_ID=" + id});
  EXPECT_EQ(second.exit_code, 2);
  EXPECT_NE(second.err.find("CHORUS_JOB_ID='" + id + "' is in use on this host by chorus-run pid " +
                            std::to_string(first.pid())),
            std::string::npos)
      << second.err;
  EXPECT_EQ(second.out, "") << "no rank may start";
  EXPECT_LT(second.seconds, 2.0);
  const Result other_node = run(probe_job({"-n", "1", "--nnodes", "2", "--node-rank", "1",
                                           "--master-addr", "127.0.0.1", "--master-port", "29999"},
                                          {"env"}),
                                {"CHORUS_JOB_ID=" + id});
  EXPECT_EQ(other_node.exit_code, 0) << other_node.err;
}

// Rank 0 (the store's host) stops in the middle of a job with CHORUS_TIMEOUT=2: the others fail
// at the timeout, their teardown ends within min(timeout, 2 s), and chorus-run stops rank 0
// (SIGTERM and SIGCONT) after the grace period: the whole job ends within their sum.
TEST(ChorusRun, StoppedStoreHostEndsTheJobWithinTheTimeoutAndTheBounds) {
  constexpr double kTimeout = 2, kTeardown = 2, kGrace = 0.5;
  const Result r = Launch({"-n", "3", "--grace", "0.5", kCommProbe, "init", "all-reduce", "3",
                           "stop", "0", "loop"},
                          {"CHORUS_TIMEOUT=2"})
                       .finish(30s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(rank [12] \(pid \d+\) failed first)")))
      << r.err;
  EXPECT_NE(r.err.find("rank 0 killed by signal 15 (SIGTERM)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("still waiting for rank 0"), std::string::npos) << r.err;
  // Not only the first to exit: the rank they waited for.
  EXPECT_TRUE(std::regex_search(
      r.err,
      std::regex(R"(likely culprit: rank 0 \(pid \d+\), which ranks 1-2 failed waiting for)")))
      << r.err;
  EXPECT_LT(r.seconds, kTimeout + kTeardown + kGrace + 1.5) << r.err;
  std::printf("the job ended %.2f s after it started\n", r.seconds);
}

// A rank stops (SIGSTOP) inside a device mesh: the others fail at the timeout, each naming the
// rank it waited for by its group and world rank, and chorus-run names the stopped rank as the
// likely culprit (not the first rank to exit), saying how it decided.
void expect_stopped_rank_named(const std::vector<std::string>& mesh, int stopped,
                               const std::string& waited_for) {
  constexpr double kTimeout = 2, kTeardown = 2, kGrace = 0.5;
  std::vector<std::string> args = {"-n", "4", "--grace", "0.5", kCommProbe, "init", "mesh"};
  args.insert(args.end(), mesh.begin(), mesh.end());
  for (const std::string& a : {std::string("mesh-steps"), std::string("3"), std::string("stop"),
                               std::to_string(stopped), std::string("mesh-loop")})
    args.push_back(a);
  const Result r = Launch(args, {"CHORUS_TIMEOUT=2", "CHORUS_DETERMINISTIC=1"}).finish(30s);
  EXPECT_NE(r.exit_code, 0);
  const std::string culprit =
      "chorus-run: likely culprit: rank " + std::to_string(stopped) + " (pid";
  EXPECT_NE(r.err.find(culprit), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("it was stopped (SIGSTOP or a debugger) when chorus-run ended it"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("(from the failure reports, each rank -> the rank its error names: "),
            std::string::npos)
      << r.err;
  // The errors name the stopped rank in its group and in the world.
  EXPECT_TRUE(std::regex_search(r.err, std::regex("still waiting for " + waited_for)))
      << waited_for << "\n"
      << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex(R"(\[rank \d of (dp|tp|pp) group \d \(world rank \d\), [a-z_]+ #\d+\])")))
      << r.err;
  EXPECT_LT(r.seconds, kTimeout + kTeardown + kGrace + 1.5) << r.err;
}

TEST(ChorusRun, AStoppedRankOfADataAndPipelineMeshIsNamed) {
  // dp 2 x pp 2, rank order: world rank = dp + 2 pp. World rank 1 is dp 1 of dp group 0 and
  // stage 0 of pp group 1, which world ranks 0 (dp) and 3 (pp) wait for.
  expect_stopped_rank_named({"2", "1", "2"}, 1,
                            R"(rank (1 of dp group 0|0 of pp group 1) \(world rank 1\))");
}

TEST(ChorusRun, AStoppedRankOfATensorAndPipelineMeshIsNamed) {
  // tp 2 x pp 2: world rank = tp + 2 pp. World rank 2 is tp 0 of tp group 1 and stage 1 of pp
  // group 0; world rank 3, its tp partner, waits for it.
  expect_stopped_rank_named({"1", "2", "2"}, 2,
                            R"(rank (0 of tp group 1|1 of pp group 0) \(world rank 2\))");
}

// Start-up failures are attributed to the rank that died first, even when the ranks that fail
// because of it exit before it has finished dying. Rank 0 (serving the store) is killed while the
// others wait in set-up for rank 3: those connected lose the store at once and exit (a rank still
// connecting keeps trying, like rank 3, until chorus-run stops it).
TEST(ChorusRun, StartUpFailureNamesTheRankThatDiedFirst) {
  constexpr int kTrials = 5;
  for (int trial = 0; trial < kTrials; ++trial) {
    const Result r = Launch({"-n", "4", "--grace", "0.2", kCommProbe, "kill-after", "0", "1000",
                             "delay", "3", "5000", "init"},
                            {"CHORUS_TIMEOUT=10"})
                         .finish(30s);
    EXPECT_EQ(r.exit_code, 128 + SIGKILL) << "trial " << trial << "\n" << r.err;
    EXPECT_TRUE(std::regex_search(
        r.err, std::regex(R"(chorus-run: rank 0 \(pid \d+\) failed first: killed by signal 9)")))
        << "trial " << trial << "\n"
        << r.err;
    EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(ranks? [12](-2)? exited with code 1)")))
        << "trial " << trial << ": no rank failed because of rank 0\n"
        << r.err;
    EXPECT_LT(r.seconds, 4.0) << r.err;
  }
}

// A rank killed during set-up (not the store's host): the others name it at once ("died during
// set-up"), and chorus-run names it first.
TEST(ChorusRun, RankKilledDuringSetUpIsNamedByEveryone) {
  const Result r = Launch({"-n", "3", "--grace", "5", kCommProbe, "delay", "1", "1000",
                           "kill-after", "2", "500", "init"},
                          {"CHORUS_TIMEOUT=10"})
                       .finish(30s);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(rank 2 \(pid \d+\) failed first)"))) << r.err;
  EXPECT_NE(r.err.find("rank 2 (pid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("died during set-up"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ranks 0-1 exited with code 1"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 4.0) << r.err;
}

// from_env() again in one process, under chorus-run: rank 0 serves the store it was handed for
// every communicator.
TEST(ChorusRun, RanksMakeTheirCommunicatorAgain) {
  const Result r =
      Launch({"-n", "3", kCommProbe, "init", "all-reduce", "2", "fini", "init", "all-reduce", "2",
              "fini", "delay", "1", "200", "init", "all-reduce", "1"},
             {"CHORUS_TIMEOUT=20"})
          .finish(30s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
}

// ---- command line ------------------------------------------------------------------------------

TEST(ChorusRun, BadUsageExitsTwoWithMessage) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "-n N"},
      {{"-n", "0", kProbe}, "-n"},
      {{"-n", "two", kProbe}, "expected an integer"},
      {{"--bogus", "-n", "2", kProbe}, "unknown option '--bogus'"},
      {{"-n", "2"}, "missing PROGRAM"},
      {{"-n", "2", "--grace"}, "--grace needs a value"},
      {{"-n", "2", "--grace", "-1", kProbe}, "--grace"},
      {{"-n", "2", "--bind", "sockets", kProbe}, "--bind"},
      {{"-n", "2", "--nnodes", "2", kProbe}, "--master-addr"},
      {{"-n", "2", "--nnodes", "2", "--node-rank", "2", kProbe}, "--node-rank"},
  };
  for (const auto& [args, message] : cases) {
    const Result r = run(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined;
    EXPECT_NE(r.err.find("chorus-run: "), std::string::npos) << joined << "\n" << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << joined << "\n" << r.err;
    EXPECT_NE(r.err.find("Usage: chorus-run"), std::string::npos) << joined << "\n" << r.err;
  }
}

TEST(ChorusRun, MultiNodeNeedsAJobId) {
  const Result r = run(probe_job({"-n", "1", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                                  "127.0.0.1", "--master-port", "29999"},
                                 {}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("CHORUS_JOB_ID"), std::string::npos) << r.err;
}

TEST(ChorusRun, HelpDescribesTheLauncher) {
  const Result r = run({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("Usage: chorus-run -n N"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CHORUS_JOB_ID"), std::string::npos);
  EXPECT_NE(r.out.find("CHORUS_STORE_FD"), std::string::npos);
}

TEST(ChorusRun, MissingProgramExits127) {
  const Result r = run({"-n", "2", "/nonexistent/program"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find("cannot execute '/nonexistent/program'"), std::string::npos) << r.err;
}

// chorus-tune on two ranks, small sizes: broadcast is written in both placements; tuning it
// again replaces both (other collectives' lines stay); --show reads the result.
TEST(ChorusTune, WritesBroadcastInBothPlacementsAndReplacesItsOwnLines) {
  const std::string out = ::testing::TempDir() + "chorus_tune_test.txt";
  std::filesystem::remove(out);
  const auto count = [&](const std::string& prefix) {
    std::ifstream f(out);
    int n = 0;
    for (std::string line; std::getline(f, line);) n += line.rfind(prefix, 0) == 0;
    return n;
  };
  for (const char* colls : {"broadcast,gather", "broadcast"}) {
    const Result r = run_tune({"-n", "2", kTune, "--colls", colls, "--max-bytes", "1K", "--out",
                               out, "--cost-out", out + ".cost"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // ring, tree and direct, each on one path or two (two where single copy is possible), and
    // fanout, which has one
    const int curves = count("2 broadcast ");
    EXPECT_TRUE(curves == 4 || curves == 7) << curves;
    EXPECT_EQ(count("2 broadcast/in-place "), curves) << "in-place curves: one per variant";
    EXPECT_GE(count("2 gather "), 1) << "the gather lines of the first run were lost";
    // The cost constants fitted to the same run, beside the table.
    std::ifstream cost(out + ".cost");
    std::stringstream text;
    text << cost.rdbuf();
    EXPECT_NE(text.str().find("shm 2 broadcast ring 0 "), std::string::npos) << text.str();
    // and its in-place curves' own (the selector chooses broadcast by them).
    EXPECT_NE(text.str().find("shm 2 broadcast/in-place ring 0 "), std::string::npos) << text.str();
  }
  const Result show = run_tune({"-n", "1", kTune, "--show", "--file", out});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_NE(show.out.find("broadcast/in-place direct"), std::string::npos) << show.out;
  std::filesystem::remove(out);
  std::filesystem::remove(out + ".cost");
}

// Ranks that reach each other only over UCX (CHORUS_TRANSPORT=ucx) get their constants filed
// under "ucx", where the selector prices such a communicator, and those of shared memory stay.
TEST(ChorusTune, FilesTheConstantsUnderTheLinkTheRanksUsed) {
#if !CHORUS_TOOLS_TEST_UCX
  GTEST_SKIP() << "chorus was built without UCX";
#endif
  const std::string cost = ::testing::TempDir() + "chorus_tune_link_test.cost";
  std::filesystem::remove(cost);
  const auto text = [&] {
    std::ifstream f(cost);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  const std::vector<std::string> job = {"-n",         "2",           kTune,          "--colls",
                                        "all_reduce", "--max-bytes", "1K",           "--cost-out",
                                        cost,         "--out",       cost + ".table"};
  Result r = run_tune(job);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(text().find("shm 2 all_reduce ring 0 "), std::string::npos) << text();
  // all_reduce is measured in place too: the selector chooses it by those constants.
  EXPECT_NE(text().find("shm 2 all_reduce/in-place ring 0 "), std::string::npos) << text();
  EXPECT_EQ(text().find("ucx 2 "), std::string::npos) << text();
  r = Launch(job, {"CHORUS_TRANSPORT=ucx"}).finish(90s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("wrote the ucx constants of world size 2"), std::string::npos) << r.err;
  EXPECT_NE(text().find("ucx 2 all_reduce ring 0 "), std::string::npos) << text();
  EXPECT_NE(text().find("shm 2 all_reduce ring 0 "), std::string::npos) << "the shm run's lines";
  std::filesystem::remove(cost);
  std::filesystem::remove(cost + ".table");
}

// --algos measures only the algorithms it names and keeps the file's other curves of the same
// collectives; names that no measured collective has are an error.
TEST(ChorusTune, AlgosReplacesOnlyTheNamedCurves) {
  const std::string out = ::testing::TempDir() + "chorus_tune_algos_test.txt";
  std::filesystem::remove(out);
  const auto lines = [&] {
    std::ifstream f(out);
    std::vector<std::string> all;
    for (std::string line; std::getline(f, line);)
      if (!line.empty() && line[0] != '#') all.push_back(line);
    return all;
  };
  Result r = run_tune({"-n", "2", kTune, "--colls", "broadcast", "--max-bytes", "1K", "--out", out,
                       "--cost-out", out + ".cost"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> before = lines();
  r = run_tune({"-n", "2", kTune, "--colls", "broadcast", "--algos", "fanout", "--max-bytes", "1K",
                "--out", out, "--cost-out", out + ".cost"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> after = lines();
  ASSERT_EQ(after.size(), before.size());
  int fanout = 0, kept = 0;
  for (const std::string& line : after) {
    const bool is_fanout = line.find(" fanout ") != std::string::npos;
    fanout += is_fanout;
    if (!is_fanout) kept += std::find(before.begin(), before.end(), line) != before.end();
  }
  EXPECT_EQ(fanout, 2) << "one fanout curve out of place and one in place";
  EXPECT_EQ(kept, static_cast<int>(after.size()) - 2) << "the other curves must stay as they were";

  r = run_tune({"-n", "2", kTune, "--colls", "gather", "--algos", "fanout", "--out", out,
                "--cost-out", out + ".cost"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("names no algorithm"), std::string::npos) << r.err;
  r = run_tune({"-n", "1", kTune, "--algos", "nosuch"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown algorithm 'nosuch'"), std::string::npos) << r.err;
  std::filesystem::remove(out);
}

// --device fits the IPC path's constants on device buffers; without a GPU every rank refuses
// with the reason (and the fit is skipped). Options it does not go with are usage errors.
TEST(ChorusTune, DeviceFitsTheIpcPathOrSaysWhyNot) {
  Result r = run_tune({"-n", "1", kTune, "--device", "--show"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--device measures: it does not go with --show"), std::string::npos)
      << r.err;
  r = run_tune({"-n", "1", kTune, "--device", "--out", "table.txt"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--device writes the cost file only"), std::string::npos) << r.err;

  const std::string cost = ::testing::TempDir() + "chorus_tune_device_test.cost";
  std::filesystem::remove(cost);
  r = run_tune({"-n", "2", kTune, "--device", "--colls", "all_reduce", "--max-bytes", "64K",
                "--cost-out", cost});
  if (r.err.find("--device: no GPU: ") != std::string::npos) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_FALSE(std::filesystem::exists(cost));
    GTEST_SKIP() << "no GPU: " << r.err;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream f(cost);
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_NE(text.str().find("ipc 2 all_reduce ring 0 "), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("ipc 2 all_reduce/in-place ring 0 "), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("ring/fifo"), std::string::npos) << "one path on device buffers";
  EXPECT_EQ(text.str().find("shm 2 "), std::string::npos) << text.str();
  std::filesystem::remove(cost);
}

}  // namespace
