// chorus-copy-roofline end to end: real processes copying real shared memory. Checks the line it
// prints (its figures agree with each other) and its answers to bad flags, not the speed.

#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "run_command.h"

namespace {

using Result = chorus::testing::CommandResult;

Result run(const std::string& args) {
  return chorus::testing::run_command(std::string(CHORUS_COPY_ROOFLINE_BIN) + " " + args);
}

// procs, MiB, store kind, through a ring, ms per round, GB/s of copies, bytes / time.
const std::regex kLine(
    R"(procs (\d+), (\d+) MiB each, (streaming|cached) stores(, through a 2 MiB ring from one )"
    R"(writer)?: ([0-9.]+) ms per round, ([0-9.]+) GB/s of copies, bytes / time ([0-9.]+) GB/s)");

// Each store kind, straight from the source and through the ring: the processes' copies are
// checked against the source by the tool itself (a failed one exits non-zero).
TEST(CopyRoofline, PrintsConsistentFiguresForEachStoreKind) {
  for (const std::string flags :
       {"--store stream", "--store cached", "--store stream --ring", "--store cached --ring"}) {
    const Result r = run("--procs 3 --bytes 3M --iters 2 " + flags);
    ASSERT_EQ(r.exit_code, 0) << flags << ": " << r.out;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, kLine)) << r.out;
    EXPECT_EQ(m[1], "3");
    EXPECT_EQ(m[2], "3");
    EXPECT_EQ(m[3], flags.find("stream") != std::string::npos ? "streaming" : "cached");
    EXPECT_EQ(m[4].matched, flags.find("--ring") != std::string::npos) << r.out;
    const double ms = std::stod(m[5]), copies = std::stod(m[6]), each = std::stod(m[7]);
    EXPECT_GT(ms, 0);
    EXPECT_GT(each, 0);
    // Three processes: the copies are three times one buffer per round (both printed rounded).
    EXPECT_NEAR(copies, 3 * each, 0.03 + 0.01 * copies) << r.out;
    // bytes / time: 3 MiB over the round's milliseconds, which are printed to 0.005 ms.
    EXPECT_NEAR(each, 3.0 * (1 << 20) / (ms * 1e-3) / 1e9, 0.01 + each * (0.01 + 0.006 / ms))
        << r.out;
  }
}

// procs, MiB, store kind, ms per round, bytes / time.
const std::regex kAllReduceLine(
    R"(procs (\d+), (\d+) MiB each, (streaming|cached) stores, ring all-reduce work( through )"
    R"(shared FIFOs)?: ([0-9.]+) ms per round, bytes / time ([0-9.]+) GB/s)");

// Alone and through shared FIFOs, each store kind, 2 and 3 processes (3: the all-gather forwards):
// the tool checks every result element against the ring's (it exits 3 when one differs).
TEST(CopyRoofline, AllReduceWorkPrintsConsistentFigures) {
  for (const std::string procs : {"2", "3"})
    for (const std::string flags : {"", " --shared"})
      for (const std::string store : {"stream", "cached"}) {
        const std::string args =
            "--all-reduce --procs " + procs + " --bytes 2M --iters 2 --store " + store + flags;
        const Result r = run(args);
        ASSERT_EQ(r.exit_code, 0) << args << ": " << r.out;
        std::smatch m;
        ASSERT_TRUE(std::regex_search(r.out, m, kAllReduceLine)) << args << ": " << r.out;
        EXPECT_EQ(m[1], procs);
        // Rounded up to whole MiB per process, so that every slice of `procs` segments is whole:
        // 2 MiB stays 2 MiB for 2 processes and becomes 3 MiB for 3.
        EXPECT_EQ(m[2], procs == "2" ? "2" : "3") << r.out;
        EXPECT_EQ(m[3], store == "stream" ? "streaming" : "cached");
        EXPECT_EQ(m[4].matched, !flags.empty()) << r.out;
        const double ms = std::stod(m[5]), each = std::stod(m[6]);
        const double mib = std::stod(m[2]);
        EXPECT_GT(ms, 0);
        EXPECT_NEAR(each, mib * (1 << 20) / (ms * 1e-3) / 1e9, 0.01 + each * (0.01 + 0.006 / ms))
            << r.out;
      }
}

TEST(CopyRoofline, RoundsTheSizeUpToWholePieces) {
  const Result r = run("--procs 1 --bytes 1500K --iters 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("procs 1, 2 MiB each"), std::string::npos) << r.out;
}

TEST(CopyRoofline, BadFlagsExitWithTwoAndTheUsage) {
  for (const char* args :
       {"--bytes 0", "--bytes 12Q", "--procs 0", "--iters 0", "--store nt", "--procs",
        "--frobnicate", "--all-reduce --procs 1", "--all-reduce --ring", "--shared", "--warmup 2",
        "--all-reduce --warmup -1"}) {
    const Result r = run(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find("usage: chorus-copy-roofline"), std::string::npos) << args;
  }
  const Result help = run("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("usage: chorus-copy-roofline"), std::string::npos);
}

}  // namespace
