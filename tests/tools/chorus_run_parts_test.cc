// chorus-run's pieces on their own: option parsing, line tagging, wait statuses, job ids, the
// shm sweep and the rank environment.

#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "culprit.h"
#include "exit_queue.h"
#include "exit_status.h"
#include "failure_reports.h"
#include "job_id.h"
#include "options.h"
#include "rank_spawn.h"
#include "shm_sweep.h"
#include "tagged_output.h"

namespace chorus::run {
namespace {

Options parse(std::vector<std::string> args) { return parse_options(args); }

// The rank the failure reports lead to: through chains, by majority, and not past a loop or a
// rank on another node.
TEST(Culprit, FollowsTheReportsToTheRankEveryoneWaitedFor) {
  // Rank 1 stopped: 3 and 0 waited for it, 2 for 3; 3 exited first.
  std::vector<RankEnd> ends = {{0, true, true, false},
                               {1, true, false, true},
                               {2, true, true, false},
                               {3, true, true, false}};
  FailureReports reports;
  for (const char* line : {"failed 3 1", "failed 0 1", "failed 2 3"}) reports.add_line(line);
  std::optional<Culprit> c = find_culprit(ends, reports, 3);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->index, 1u);
  EXPECT_EQ(c->waiting, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(c->reports, "0 -> 1, 2 -> 3, 3 -> 1");
  // A crash that blames itself is the origin of the ranks that blame it.
  FailureReports crash;
  for (const char* line : {"failed 2 2", "failed 0 2", "failed 1 0"}) crash.add_line(line);
  c = find_culprit(ends, crash, 0);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->index, 2u);
  // A loop, or a rank that is not here, ends the path where it is; no reports, no culprit.
  FailureReports loop;
  for (const char* line : {"failed 0 1", "failed 1 0", "failed 2 9"}) loop.add_line(line);
  c = find_culprit(ends, loop, 0);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->index, 1u) << "0 -> 1 -> 0 ends at 1, 1 -> 0 at 0, 2 -> 9 at 2: a tie goes to "
                             "where the first failure leads";
  c = find_culprit(ends, loop, 2);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->index, 2u);
  EXPECT_FALSE(find_culprit(ends, FailureReports(), 0).has_value());
}

TEST(Options, AcceptsEveryFlagForm) {
  const Options o =
      parse({"-n4", "--nnodes=3", "--node-rank", "2", "--master-addr=10.0.0.1", "--master-port",
             "29500", "--tag-output", "--grace", "0.5", "--bind", "none", "prog", "-n", "7"});
  EXPECT_EQ(o.nproc_per_node, 4);
  EXPECT_EQ(o.nnodes, 3);
  EXPECT_EQ(o.node_rank, 2);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_TRUE(o.tag_output);
  EXPECT_DOUBLE_EQ(o.grace_seconds, 0.5);
  EXPECT_EQ(o.command, (std::vector<std::string>{"prog", "-n", "7"})) << "PROGRAM's own flags";
}

TEST(Options, DoubleDashEndsOptions) {
  const Options o = parse({"-n", "1", "--", "--looks-like-a-flag"});
  EXPECT_EQ(o.command, std::vector<std::string>{"--looks-like-a-flag"});
}

TEST(Options, Defaults) {
  const Options o = parse({"-n", "2", "prog"});
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.node_rank, 0);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_EQ(o.master_port, 0);
  EXPECT_FALSE(o.tag_output);
}

TEST(Options, RejectsMalformedLines) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"prog"},
           {"-n", "2"},
           {"-n", "-1", "prog"},
           {"-n", "2x", "prog"},
           {"-n", "2", "--master-port", "70000", "prog"},
           {"-n", "2", "--tag-output=yes", "prog"},
           {"-n", "2", "--nnodes", "2", "--master-addr", "h", "prog"},  // no fixed port
           {"-n", "2", "--node-rank", "1", "prog"},
           {"-n", "2", "--grace", "soon", "prog"},
           {"-x", "prog"},
       }) {
    EXPECT_THROW(parse(args), UsageError) << args[0] << " " << args.size();
  }
}

TEST(Options, HelpNeedsNothingElse) { EXPECT_TRUE(parse({"--help"}).help); }

TEST(LineTagger, TagsCompleteLinesAndKeepsPartialOnes) {
  LineTagger t("[3] ");
  EXPECT_EQ(t.feed("hel"), "");
  EXPECT_EQ(t.feed("lo\nwor"), "[3] hello\n");
  EXPECT_EQ(t.feed("ld\n\nx"), "[3] world\n[3] \n");
  EXPECT_EQ(t.finish(), "[3] x\n");
  EXPECT_EQ(t.finish(), "");
}

TEST(LineTagger, SplitsOverlongLines) {
  LineTagger t("[0] ");
  const std::string chunk(LineTagger::kMaxLine, 'a');
  const std::string out = t.feed(chunk);
  EXPECT_EQ(out, "[0] " + chunk + "\n");
  EXPECT_EQ(t.feed("b\n"), "[0] b\n");
}

TEST(ExitStatus, DescribesExitsAndSignals) {
  EXPECT_EQ(describe_wait_status(W_EXITCODE(3, 0)), "exited with code 3");
  EXPECT_EQ(describe_wait_status(W_EXITCODE(0, SIGSEGV)), "killed by signal 11 (SIGSEGV)");
  EXPECT_EQ(exit_code_of(W_EXITCODE(3, 0)), 3);
  EXPECT_EQ(exit_code_of(W_EXITCODE(0, SIGKILL)), 128 + SIGKILL);
  EXPECT_TRUE(is_clean_exit(W_EXITCODE(0, 0)));
  EXPECT_FALSE(is_clean_exit(W_EXITCODE(1, 0)));
  EXPECT_FALSE(is_clean_exit(W_EXITCODE(0, SIGTERM)));
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
}

TEST(JobId, RandomIdsAreTwelveLowercaseAlphanumerics) {
  const std::string a = random_job_id();
  EXPECT_EQ(a.size(), 12u);
  EXPECT_EQ(a.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789"), std::string::npos) << a;
  EXPECT_NE(a, random_job_id());
  EXPECT_TRUE(is_valid_job_id(a));
}

TEST(JobId, RejectsIdsUnfitForFileNames) {
  EXPECT_TRUE(is_valid_job_id("Run_42-b"));
  EXPECT_FALSE(is_valid_job_id(""));
  EXPECT_FALSE(is_valid_job_id("../etc"));
  EXPECT_FALSE(is_valid_job_id("a/b"));
  EXPECT_FALSE(is_valid_job_id("a b"));
  EXPECT_FALSE(is_valid_job_id(std::string(65, 'a')));
}

TEST(ShmSweep, RemovesOnlyTheJobsSegments) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("chorus-sweep-test-" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const char* name : {"chorus-job1-a", "chorus-job1-b.ring", "chorus-job10-a", "chorus-job1",
                           "other-chorus-job1-a"})
    std::ofstream(dir / name).put('x');
  std::vector<std::string> removed = sweep_job_shm("job1", dir);
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{"chorus-job1-a", "chorus-job1-b.ring"}));
  EXPECT_TRUE(fs::exists(dir / "chorus-job10-a"));
  EXPECT_TRUE(fs::exists(dir / "chorus-job1"));
  EXPECT_TRUE(fs::exists(dir / "other-chorus-job1-a"));
  fs::remove_all(dir);
}

TEST(RankEnvironment, ReplacesInheritedLaunchVariables) {
  JobLayout layout;
  layout.nproc_per_node = 4;
  layout.nnodes = 2;
  layout.node_rank = 1;
  layout.master_addr = "10.1.2.3";
  layout.master_port = 1234;
  layout.job_id = "j";
  const char* inherited[] = {"PATH=/bin", "CHORUS_RANK=99", "CHORUS_STORE_FD=7",
                             "CHORUS_DEBUG=INFO", nullptr};
  const std::vector<std::string> env = rank_environment(layout, 2, std::nullopt, inherited);
  auto has = [&](const std::string& entry) {
    return std::find(env.begin(), env.end(), entry) != env.end();
  };
  EXPECT_TRUE(has("PATH=/bin"));
  EXPECT_TRUE(has("CHORUS_DEBUG=INFO"));
  EXPECT_TRUE(has("CHORUS_RANK=6"));
  EXPECT_FALSE(has("CHORUS_RANK=99"));
  EXPECT_TRUE(has("CHORUS_WORLD_SIZE=8"));
  EXPECT_TRUE(has("CHORUS_LOCAL_RANK=2"));
  EXPECT_TRUE(has("CHORUS_LOCAL_WORLD_SIZE=4"));
  EXPECT_TRUE(has("CHORUS_NODE_RANK=1"));
  EXPECT_TRUE(has("CHORUS_MASTER_ADDR=10.1.2.3"));
  EXPECT_TRUE(has("CHORUS_MASTER_PORT=1234"));
  for (const std::string& e : env) EXPECT_FALSE(e.starts_with("CHORUS_STORE_FD=")) << e;
}

// Children that have all exited before anyone looks are reported in the order they exited, not
// in the order they were started (nor waitpid's): the last started exits first here.
TEST(ExitQueue, ReportsExitsInTheOrderTheyHappened) {
  constexpr int kChildren = 6;
  constexpr long kStepNs = 30'000'000;
  // Child i exits at start + 200 ms + (kChildren - i) steps, on one clock, however long forking
  // takes.
  timespec start{};
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  ExitQueue exits;
  std::vector<pid_t> pids;
  for (int i = 0; i < kChildren; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const long ns = start.tv_nsec + 200'000'000L + (kChildren - i) * kStepNs;
      const timespec at{start.tv_sec + ns / 1'000'000'000L, ns % 1'000'000'000L};
      while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, nullptr) != 0) {
      }
      ::_exit(i);
    }
    pids.push_back(pid);
    exits.watch(static_cast<size_t>(i), pid);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200 + (kChildren + 3) * 30));
  const std::vector<size_t> order = exits.take();
  ASSERT_EQ(order.size(), size_t{kChildren});
  for (int i = 0; i < kChildren; ++i) EXPECT_EQ(order[i], static_cast<size_t>(kChildren - 1 - i));
  EXPECT_TRUE(exits.take().empty()) << "each exit is reported once";
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid) << "take() must not reap";
  }
}

}  // namespace
}  // namespace chorus::run
