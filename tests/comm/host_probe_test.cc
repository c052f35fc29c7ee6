// The host probe (comm/host_probe.h): the first communicator on a host without cost constants
// probes and caches them, every rank chooses by rank 0's fit, a second job loads the cache
// instead of probing, and what turns the probe off does.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/error.h"
#include "host_probe.h"
#include "multiproc.h"

namespace chorus {
namespace {

using testing::run_ranks;

// A cache directory of its own per test, empty at the start.
class HostProbe : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "host_probe_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    cache_ = dir_ + "/chorus/cost-" + host + ".txt";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The environment of a job on this host: the probe's default, this test's cache.
  testing::RunOptions job(std::map<std::string, std::string> extra = {}) const {
    testing::RunOptions o;
    o.env = {{"XDG_CACHE_HOME", dir_}, {"CHORUS_COST_PROBE", "auto"}};
    for (auto& [k, v] : extra) o.env[k] = v;
    return o;
  }

  std::string dir_, cache_;
};

// Every rank's choices for the probed collectives over a range of sizes, as one string.
std::string choices(const Communicator& comm) {
  std::string out;
  for (Collective c : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather,
                       Collective::kBroadcast})
    for (size_t bytes = 8; bytes <= (size_t(16) << 20); bytes *= 4)
      out += comm.algorithm_for(c, bytes) + " ";
  return out;
}

// Rank 0's choices, and whether every rank made the same.
void expect_same_choices_everywhere(Communicator& comm) {
  const std::string mine = choices(comm);
  std::vector<int64_t> lengths(static_cast<size_t>(comm.size()));
  const int64_t len = static_cast<int64_t>(mine.size());
  comm.all_gather(&len, lengths.data(), 1, DataType::kI64);
  for (int64_t l : lengths) ASSERT_EQ(l, len) << "the ranks choose differently";
  std::string all(mine.size() * static_cast<size_t>(comm.size()), '\0');
  comm.all_gather(mine.data(), all.data(), mine.size(), DataType::kU8);
  for (int r = 0; r < comm.size(); ++r)
    EXPECT_EQ(all.substr(static_cast<size_t>(r) * mine.size(), mine.size()), mine)
        << "rank " << r << " chooses differently from this one";
}

TEST_F(HostProbe, FirstJobProbesAndCachesTheSecondLoads) {
  const std::string cache = cache_;
  run_ranks(
      3,
      [&](Communicator& comm) {
        // The probe ran inside the constructor: the cache exists, the lock is gone.
        struct stat st {};
        EXPECT_EQ(::stat(cache.c_str(), &st), 0) << cache << " was not written";
        EXPECT_NE(::access((cache + ".probing").c_str(), F_OK), 0);
        expect_same_choices_everywhere(comm);
        // And the collectives run by the fitted choices.
        std::vector<float> in(100000, static_cast<float>(comm.rank() + 1)), out(in.size());
        comm.all_reduce(in.data(), out.data(), in.size(), DataType::kF32, ReduceOp::kSum);
        EXPECT_EQ(out.back(), 6.0f);
      },
      job());
  std::ifstream f(cache);
  std::stringstream text;
  text << f.rdbuf();
  for (const char* line :
       {"shm 3 all_reduce ring ", "shm 3 all_reduce direct ", "shm 3 all_reduce/in-place ring ",
        "shm 3 reduce_scatter ring ", "shm 3 all_gather ring ", "shm 3 broadcast direct "})
    EXPECT_NE(text.str().find(line), std::string::npos) << line << "missing in\n" << text.str();
  struct stat first {};
  ASSERT_EQ(::stat(cache.c_str(), &first), 0);

  // A second job (another world size too) loads the cache: no probe rewrites it.
  run_ranks(
      2,
      [&](Communicator& comm) {
        struct stat st {};
        ASSERT_EQ(::stat(cache.c_str(), &st), 0);
        EXPECT_EQ(st.st_ino, first.st_ino) << "the second job probed again";
        expect_same_choices_everywhere(comm);
      },
      job());
}

// Each of these leaves the host on the defaults: no probe, no cache file.
TEST_F(HostProbe, WhatTurnsItOff) {
  const std::string cache = cache_;
  const std::map<std::string, std::string> offs[] = {
      {{"CHORUS_COST_PROBE", "off"}},  {{"CHORUS_TUNE", "off"}},
      {{"CHORUS_TUNE", "builtin"}},    {{"CHORUS_ALGO", "ring"}},
      {{"CHORUS_DETERMINISTIC", "1"}}, {{"CHORUS_COST_FILE", dir_ + "/empty.txt"}},
  };
  std::ofstream(dir_ + "/empty.txt") << "# no constants\n";
  for (const auto& env : offs) {
    run_ranks(
        2, [](Communicator&) {}, job(env));
    EXPECT_NE(::access(cache.c_str(), F_OK), 0) << env.begin()->first << " probed";
  }
}

// Another job probing now (a fresh lock) keeps this one on the defaults; a lock left by a job
// that died long ago is taken over.
TEST_F(HostProbe, ALockOfAnotherJob) {
  std::filesystem::create_directories(std::filesystem::path(cache_).parent_path());
  const std::string lock = cache_ + ".probing";
  std::ofstream(lock) << "12345\n";
  run_ranks(
      2, [](Communicator&) {}, job());
  EXPECT_NE(::access(cache_.c_str(), F_OK), 0) << "probed while another job held the lock";
  EXPECT_EQ(::access(lock.c_str(), F_OK), 0) << "removed another job's lock";

  const timeval old[2] = {{::time(nullptr) - 600, 0}, {::time(nullptr) - 600, 0}};
  ASSERT_EQ(::utimes(lock.c_str(), old), 0);
  run_ranks(
      2, [](Communicator&) {}, job());
  EXPECT_EQ(::access(cache_.c_str(), F_OK), 0) << "a stale lock stopped the probe";
  EXPECT_NE(::access(lock.c_str(), F_OK), 0);
}

TEST(HostProbeConditions, WhenRankZeroProbes) {
  ::unsetenv("CHORUS_COST_PROBE");
  ProbeConditions c{.world_size = 2, .hosts = 1, .shm = true, .model_defaults = true};
  EXPECT_EQ(host_probe_skipped(c), "");
  for (auto change : std::vector<void (*)(ProbeConditions&)>{
           [](ProbeConditions& p) { p.world_size = 1; },
           [](ProbeConditions& p) { p.hosts = 2; },
           [](ProbeConditions& p) { p.shm = false; },
           [](ProbeConditions& p) { p.model_defaults = false; },
           [](ProbeConditions& p) { p.table_named = true; },
           [](ProbeConditions& p) { p.forced = true; },
           [](ProbeConditions& p) { p.deterministic = true; },
       }) {
    ProbeConditions changed = c;
    change(changed);
    EXPECT_NE(host_probe_skipped(changed), "");
  }
  ::setenv("CHORUS_COST_PROBE", "off", 1);
  EXPECT_EQ(host_probe_skipped(c), "CHORUS_COST_PROBE=off");
  ::setenv("CHORUS_COST_PROBE", "sometimes", 1);
  EXPECT_THROW(host_probe_skipped(c), InvalidArgument);
  ::unsetenv("CHORUS_COST_PROBE");
}

}  // namespace
}  // namespace chorus
