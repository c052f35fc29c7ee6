// chorus-topo end to end: every view on this host and on every fixture.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "fixtures.h"

namespace chorus::topo {
namespace {

using namespace testing;

struct Result {
  int exit_code = -1;
  std::string out;  // stdout and stderr
};

Result chorus_topo(const std::string& args) {
  Result r;
  const std::string command = std::string(CHORUS_TOPO_BIN) + " " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), buf.size(), pipe)) r.out += buf.data();
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool have_program(const char* name) {
  return std::system((std::string("command -v ") + name + " >/dev/null 2>&1").c_str()) == 0;
}

TEST(ChorusTopo, RunsOnThisHost) {
  const Result r = chorus_topo("");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("Host "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Legend:"), std::string::npos) << r.out;
  EXPECT_EQ(chorus_topo("--mesh dp=2").exit_code, 0);
  EXPECT_EQ(chorus_topo("--json").exit_code, 0);
}

TEST(ChorusTopo, EveryViewOnEveryFixture) {
  for (const std::string& name : kAllFixtures) {
    const std::string xml = "--xml " + fixture_path(name);
    for (const char* view : {"", "--summary", "--matrix", "--dot", "--json"}) {
      const Result r = chorus_topo(xml + " " + view);
      EXPECT_EQ(r.exit_code, 0) << name << " " << view << "\n" << r.out;
      EXPECT_NE(r.out.find(fixture(name).hostname), std::string::npos) << name << " " << view;
    }
    const Result placed = chorus_topo(xml + " --mesh dp=2,tp=2 --hosts 2");
    EXPECT_EQ(placed.exit_code, 0) << name << "\n" << placed.out;
    EXPECT_NE(placed.out.find("Ring order: 0"), std::string::npos) << placed.out;
  }
}

TEST(ChorusTopo, MatrixInTheStyleOfNvidiaSmi) {
  const Result r = chorus_topo("--matrix --xml " + fixture_path(kDgx));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("GPU0   X      NV"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mlx5_0 PIX    PIX    NODE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CPU Affinity"), std::string::npos);
  EXPECT_NE(r.out.find("NV   = a direct GPU link (NVLink, xGMI); here NVLink"), std::string::npos);
}

TEST(ChorusTopo, JsonParses) {
  if (!have_program("python3")) GTEST_SKIP() << "python3 not installed";
  const std::string cmd =
      std::string(CHORUS_TOPO_BIN) + " --json --xml " + fixture_path(kDgx) +
      " --mesh dp=2,tp=4,pp=2 --hosts 2 | python3 -c 'import json,sys; d=json.load(sys.stdin);"
      " assert len(d[\"placement\"][\"ranks\"]) == 16; assert len(d[\"matrix\"][\"classes\"]) == "
      "18'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

TEST(ChorusTopo, DrawsWithGraphviz) {
  if (!have_program("dot")) GTEST_SKIP() << "Graphviz's dot not installed";
  const auto dir =
      std::filesystem::temp_directory_path() / ("chorus-topo-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const Result r = chorus_topo("--xml " + fixture_path(kDgx) + " --png " +
                               (dir / "dgx.png").string() + " --svg " + (dir / "dgx.svg").string());
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_GT(std::filesystem::file_size(dir / "dgx.png"), 10000u);
  EXPECT_GT(std::filesystem::file_size(dir / "dgx.svg"), 10000u);
  std::filesystem::remove_all(dir);
}

TEST(ChorusTopo, BadUsageAndMeshesThatDoNotFit) {
  for (const char* args : {"--bogus", "--xml", "--mesh tp=0", "--mesh dp=2 --hosts 0", "--hosts 2",
                           "--json --dot", "--summary=yes"}) {
    const Result r = chorus_topo(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("Usage: chorus-topo"), std::string::npos) << args;
  }
  const Result too_big = chorus_topo("--xml " + fixture_path(kDgx) + " --mesh tp=16 --hosts 2");
  EXPECT_EQ(too_big.exit_code, 1);
  EXPECT_NE(too_big.out.find("tp=16 is larger than a host"), std::string::npos) << too_big.out;
  const Result missing = chorus_topo("--xml /nonexistent.xml");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("/nonexistent.xml"), std::string::npos) << missing.out;
  const Result help = chorus_topo("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--mesh dp=D,tp=T,pp=P"), std::string::npos);
}

}  // namespace
}  // namespace chorus::topo
