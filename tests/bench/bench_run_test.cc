// chorus-bench end to end: two ranks under the real chorus-run, with the flags whose output
// depends on a live Communicator (--sweep-algos, --explain, -I 1, -z). Checks the table's shape,
// the marks and the JSON, not the speed.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "run_command.h"

namespace {

constexpr const char* kChorusRun = CHORUS_RUN_BIN;
constexpr const char* kChorusBench = CHORUS_BENCH_BIN;

using Result = chorus::testing::CommandResult;

// Runs `chorus-run -n 2 chorus-bench ARGS` through the shell, without the test's CHORUS_*
// variables (a CHORUS_ALGO would change what the selector picks) but the suite's
// CHORUS_COST_PROBE (tests/CMakeLists.txt: the host probe stays as the suite has it).
Result run_bench(const std::string& args) {
  std::vector<std::string> knobs;
  for (char** e = environ; *e != nullptr; ++e)
    if (const std::string_view v(*e);
        v.starts_with("CHORUS_") && !v.starts_with("CHORUS_COST_PROBE="))
      knobs.emplace_back(*e, std::string_view(*e).find('='));
  for (const std::string& name : knobs) ::unsetenv(name.c_str());
  return chorus::testing::run_command(std::string(kChorusRun) + " -n 2 " + kChorusBench + " " +
                                      args);
}

std::vector<std::string> data_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  return lines;
}

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() /
          (std::string(name) + "." + std::to_string(::getpid()) + ".json"))
      .string();
}

// --device: without a GPU a clear error and exit status 1; with one, checked tables (both
// timing modes), every result exact.
TEST(BenchRun, DeviceBuffers) {
  for (const char* z : {"1", "0"}) {
    const Result r =
        run_bench(std::string("all_reduce -b 8 -e 1M -f 64 -n 3 -w 1 --device -z ") + z);
    if (r.out.find("--device: no GPU: ") != std::string::npos) {
      EXPECT_EQ(r.exit_code, 1) << r.out;
      return;
    }
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("device memory (stream-ordered)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << r.out;
  }
}

TEST(BenchRun, SweepAlgosExplainAndPercentiles) {
  const std::string json_path = temp_path("bench_run_sweep");
  const Result r = run_bench(
      "all_reduce -b 8 -e 64K -f 8192 -n 4 -w 1 --sweep-algos --explain "
      "-I 1 --json " +
      json_path);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("# chorus-bench: all_reduce, 2 ranks, float, sum, 4 iters, 1 warmup, "
                       "algo sweep, blocking\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("p50      p99"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pred  algo"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << r.out;

  // Per size (8 B and 64 KiB): one line per registered algorithm, then auto; exactly one '*'
  // per size, on an algorithm the auto line ran.
  std::map<std::string, std::vector<std::string>> algos_by_size;
  std::map<std::string, std::string> starred;
  std::map<std::string, std::string> auto_ran;
  for (const std::string& line : data_lines(r.out)) {
    std::istringstream fields(line);
    std::string size;
    fields >> size;
    // The algorithm column is the text after the last two-space gap: "ring", "ring *" or
    // "auto (ring)".
    std::string algo = line.substr(line.rfind("  ") + 2);
    if (algo.ends_with(" *")) {
      algo.resize(algo.size() - 2);
      starred[size] += algo;
    } else if (algo.starts_with("auto (")) {
      auto_ran[size] = algo.substr(6, algo.size() - 7);
      algo = "auto";
    }
    algos_by_size[size].push_back(algo);
  }
  ASSERT_EQ(algos_by_size.size(), 2u) << r.out;
  for (const auto& [size, algos] : algos_by_size) {
    ASSERT_GE(algos.size(), 2u) << size;
    EXPECT_EQ(algos.back(), "auto") << size;
    EXPECT_NE(std::find(algos.begin(), algos.end(), "ring"), algos.end()) << size << "\n" << r.out;
    EXPECT_EQ(starred[size], auto_ran[size]) << size << "\n" << r.out;
  }

  std::ifstream json_file(json_path);
  std::stringstream json;
  json << json_file.rdbuf();
  std::filesystem::remove(json_path);
  for (const char* want :
       {"\"sweep_algos\": true", "\"explain\": true", "\"percentiles\": true", "\"blocking\": true",
        "\"forced\": \"auto\", \"selected\": true", "\"forced\": \"ring\"",
        "\"p50_us\": ", "\"p99_us\": ", "\"predicted_us\": "})
    EXPECT_NE(json.str().find(want), std::string::npos) << want << "\n" << json.str();
}

TEST(BenchRun, ExplainLinesAndNonBlocking) {
  const Result r = run_bench("reduce_scatter -b 1K -e 1K -n 3 -w 1 -z 0 -I 1 --explain");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("algo auto, non-blocking\n"), std::string::npos) << r.out;
  const std::vector<std::string> rows = data_lines(r.out);
  ASSERT_EQ(rows.size(), 1u) << r.out;
  // Both placements have p50/p99 values (numbers, not "-"), then pred, then the algorithm.
  const std::regex row_re(
      R"(^\s+1024\s+128\s+float\s+sum\s+-1(\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+0\s+[\d.]+\s+[\d.]+){2}\s+(\S+)\s+(\w+)$)");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(rows[0], m, row_re)) << rows[0];
  // The line after the row lists every algorithm's prediction and stars the one that ran.
  const size_t predicted = r.out.find("#   predicted (us):");
  ASSERT_NE(predicted, std::string::npos) << r.out;
  const std::string line = r.out.substr(predicted, r.out.find('\n', predicted) - predicted);
  EXPECT_NE(line.find("  " + m[3].str() + "* "), std::string::npos) << line << "\n" << r.out;
  EXPECT_EQ(std::count(line.begin(), line.end(), '*'), 1) << line;
}

// --blocks: the title says it, the JSON records it, and every block's calls are checked results.
TEST(BenchRun, Blocks) {
  for (const char* mode : {"-z 1", "-z 0"}) {
    const std::string json = ::testing::TempDir() + "/blocks.json";
    const Result r = run_bench(std::string("all_gather -b 4K -e 8K -n 3 -w 1 --blocks 3 ") + mode +
                               " --json " + json);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find(", 3 blocks x 3 iters, 1 warmup,"), std::string::npos) << r.out;
    const std::vector<std::string> rows = data_lines(r.out);
    ASSERT_EQ(rows.size(), 2u) << r.out;
    EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << r.out;
    std::ifstream in(json);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("\"blocks\": 3,"), std::string::npos) << text;
    EXPECT_NE(text.find("median over the timed blocks"), std::string::npos) << text;
  }
}

TEST(BenchRun, BadFlagIsAUsageError) {
  const Result r = run_bench("all_reduce -z 7");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("chorus-bench: -z expects 0 or 1, got '7'"), std::string::npos) << r.out;
}

}  // namespace
