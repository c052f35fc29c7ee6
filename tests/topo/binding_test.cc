#include <gtest/gtest.h>
#include <sched.h>

#include <array>
#include <cstdio>
#include <memory>
#include <set>

#include "chorus/topo/binding.h"
#include "fixtures.h"

namespace chorus::topo {
namespace {

using namespace testing;

TEST(Binding, ParsesPolicies) {
  EXPECT_EQ(parse_bind_policy("none"), BindPolicy::kNone);
  EXPECT_EQ(parse_bind_policy("cores"), BindPolicy::kCores);
  EXPECT_EQ(parse_bind_policy("numa"), BindPolicy::kNuma);
  EXPECT_FALSE(parse_bind_policy("sockets"));
}

TEST(Binding, CoresNearEachRanksGpu) {
  const Topology& t = fixture(kDgx);
  const auto cpus = local_rank_cpus(t, 8, BindPolicy::kCores);
  ASSERT_EQ(cpus.size(), 8u);
  std::set<int> seen;
  for (size_t i = 0; i < cpus.size(); ++i) {
    ASSERT_FALSE(cpus[i].empty());
    for (int pu : cpus[i]) {
      EXPECT_EQ(pu < 16, i < 4) << "rank " << i << " bound to PU " << pu << " on the far socket";
      EXPECT_TRUE(seen.insert(pu).second);
    }
  }
}

TEST(Binding, NumaRoundRobin) {
  const Topology& t = fixture(kCpu2);
  const auto cpus = local_rank_cpus(t, 8, BindPolicy::kNuma);
  for (size_t i = 0; i < cpus.size(); ++i)
    EXPECT_EQ(format_cpu_list(cpus[i]), t.nodes[static_cast<size_t>(t.numa_nodes()[i % 4])].cpus);
  for (const auto& none : local_rank_cpus(t, 3, BindPolicy::kNone)) EXPECT_TRUE(none.empty());
}

std::string run_command(const std::string& command) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  std::array<char, 4096> buf;
  while (pipe && std::fgets(buf.data(), buf.size(), pipe.get())) out += buf.data();
  return out;
}

TEST(Binding, ChorusRunBindsRanksToDistinctCores) {
  cpu_set_t allowed;
  ASSERT_EQ(::sched_getaffinity(0, sizeof allowed, &allowed), 0);
  if (CPU_COUNT(&allowed) < 2) GTEST_SKIP() << "needs 2 usable CPUs";
  const std::string out = run_command(std::string(CHORUS_RUN_BIN) +
                                      " -n 2 --tag-output --bind cores -- sh -c "
                                      "'grep Cpus_allowed_list /proc/self/status' 2>&1");
  std::set<std::string> lists;
  for (const char* tag : {"[0] Cpus_allowed_list:", "[1] Cpus_allowed_list:"}) {
    const size_t at = out.find(tag);
    ASSERT_NE(at, std::string::npos) << out;
    const size_t start = out.find_first_not_of(" \t", at + std::string(tag).size());
    lists.insert(out.substr(start, out.find('\n', start) - start));
  }
  EXPECT_EQ(lists.size(), 2u) << "both ranks bound to the same CPUs:\n" << out;
}

}  // namespace
}  // namespace chorus::topo
