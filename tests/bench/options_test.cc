#include "chorus_bench/options.h"

#include <gtest/gtest.h>

#include <initializer_list>

namespace chorus::bench {
namespace {

ParsedOptions parse(std::initializer_list<std::string_view> args) {
  const std::vector<std::string_view> v(args);
  return parse_options(v);
}

TEST(Options, DefaultsAreNcclTests) {
  const ParsedOptions p = parse({"all_reduce"});
  ASSERT_EQ(p.error, "");
  const Options& o = p.options;
  EXPECT_EQ(o.collectives, std::vector<BenchCollective>{BenchCollective::kAllReduce});
  EXPECT_EQ(o.sizes.min_bytes, 32u << 20);
  EXPECT_EQ(o.sizes.max_bytes, 32u << 20);
  EXPECT_EQ(o.sizes.factor, 2u);
  EXPECT_EQ(o.iters, 20);
  EXPECT_EQ(o.warmup, 5);
  EXPECT_TRUE(o.check);
  EXPECT_EQ(o.dtype, DataType::kF32);
  EXPECT_EQ(o.op, ReduceOp::kSum);
  EXPECT_EQ(o.root, 0);
  EXPECT_EQ(o.algorithm, "");
  EXPECT_EQ(o.json_path, "");
  EXPECT_TRUE(o.blocking);
  EXPECT_FALSE(o.percentiles);
  EXPECT_FALSE(o.sweep_algos);
  EXPECT_FALSE(o.explain);
}

TEST(Options, TheDemoCommandLine) {
  const ParsedOptions p = parse({"all", "-b", "8", "-e", "16M", "-f", "4", "-n", "20", "-w", "5"});
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(p.options.collectives.size(), std::size(kAllBenchCollectives));
  EXPECT_EQ(p.options.sizes.min_bytes, 8u);
  EXPECT_EQ(p.options.sizes.max_bytes, 16u << 20);
  EXPECT_EQ(p.options.sizes.factor, 4u);
}

TEST(Options, EveryFlagInEveryForm) {
  const ParsedOptions p =
      parse({"-b1K", "--maxbytes=2G", "reduce", "-i", "512", "--iters", "7", "-w0", "-c", "0", "-d",
             "bf16", "--op=max", "-r", "3", "--algo", "tree", "--json=out.json"});
  ASSERT_EQ(p.error, "");
  const Options& o = p.options;
  EXPECT_EQ(o.collectives, std::vector<BenchCollective>{BenchCollective::kReduce});
  EXPECT_EQ(o.sizes.min_bytes, 1024u);
  EXPECT_EQ(o.sizes.max_bytes, size_t{2} << 30);
  EXPECT_EQ(o.sizes.step_bytes, 512u);
  EXPECT_EQ(o.iters, 7);
  EXPECT_EQ(o.warmup, 0);
  EXPECT_FALSE(o.check);
  EXPECT_EQ(o.dtype, DataType::kBF16);
  EXPECT_EQ(o.op, ReduceOp::kMax);
  EXPECT_EQ(o.root, 3);
  EXPECT_EQ(o.algorithm, "tree");
  EXPECT_EQ(o.json_path, "out.json");
}

TEST(Options, BlockingPercentilesSweepExplain) {
  ParsedOptions p = parse({"all_reduce", "-z", "0", "-I", "1", "--sweep-algos", "--explain"});
  ASSERT_EQ(p.error, "");
  EXPECT_FALSE(p.options.blocking);
  EXPECT_TRUE(p.options.percentiles);
  EXPECT_TRUE(p.options.sweep_algos);
  EXPECT_TRUE(p.options.explain);

  p = parse({"--blocking=1", "--percentiles", "0", "-z0", "-I1", "broadcast", "--blocking", "1"});
  ASSERT_EQ(p.error, "");
  EXPECT_TRUE(p.options.blocking);
  EXPECT_TRUE(p.options.percentiles);
  EXPECT_FALSE(p.options.sweep_algos);
  EXPECT_FALSE(p.options.explain);

  // -I and -i are different flags.
  p = parse({"all_reduce", "-i", "8", "-I", "1"});
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(p.options.sizes.step_bytes, 8u);
  EXPECT_TRUE(p.options.percentiles);

  // A switch does not swallow the next argument.
  p = parse({"--explain", "all_gather"});
  ASSERT_EQ(p.error, "");
  EXPECT_TRUE(p.options.explain);
  EXPECT_EQ(p.options.collectives, std::vector<BenchCollective>{BenchCollective::kAllGather});

  // --algo auto is what a sweep ends with anyway.
  EXPECT_EQ(parse({"all_reduce", "--sweep-algos", "--algo", "auto"}).error, "");
}

TEST(Options, Blocks) {
  EXPECT_EQ(parse({"all_reduce"}).options.blocks, 1);
  ParsedOptions p = parse({"all_reduce", "--blocks", "3", "-z", "0"});
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(p.options.blocks, 3);
  EXPECT_EQ(parse({"all_reduce", "--blocks=5"}).options.blocks, 5);
  EXPECT_NE(parse({"all_reduce", "--blocks", "0"}).error, "");
  EXPECT_NE(parse({"all_reduce", "--blocks", "x"}).error, "");
  // A block's median and each call's percentiles are two ways of timing: one at a time.
  p = parse({"all_reduce", "--blocks", "3", "-I", "1"});
  EXPECT_NE(p.error.find("--blocks"), std::string::npos) << p.error;
  EXPECT_EQ(parse({"all_reduce", "--blocks", "1", "-I", "1"}).error, "");
}

TEST(Options, Device) {
  EXPECT_FALSE(parse({"all_reduce"}).options.device);
  ParsedOptions p = parse({"--device", "all_gather", "-z", "0"});
  ASSERT_EQ(p.error, "");
  EXPECT_TRUE(p.options.device);
  EXPECT_FALSE(p.options.blocking);
  EXPECT_NE(parse({"all_reduce", "--device=1"}).error, "") << "--device is a switch";
}

TEST(Options, Help) {
  EXPECT_TRUE(parse({"-h"}).help);
  EXPECT_TRUE(parse({"all_reduce", "--help"}).help);
  // Every flag is in the help text.
  for (const char* flag :
       {"-b, --minbytes", "-e, --maxbytes", "-f, --stepfactor", "-i, --stepbytes", "-n, --iters",
        "-w, --warmup_iters", "-c, --check", "-z, --blocking 0|1", "-I, --percentiles 0|1",
        "-d, --datatype", "-o, --op", "-r, --root", "--algo NAME", "--sweep-algos", "--explain",
        "--device", "--json FILE", "--print-env", "-h, --help"})
    EXPECT_NE(usage().find(flag), std::string::npos) << flag;
  // And the default -z with the reason for it.
  EXPECT_NE(usage().find("(default 1, unlike nccl-tests' 0"), std::string::npos);
}

TEST(Options, RejectsWithAReason) {
  const struct {
    std::initializer_list<std::string_view> args;
    std::string_view reason;
  } kCases[] = {
      {{}, "no collective"},
      {{"allreduce"}, "unknown collective 'allreduce'"},
      {{"all_reduce", "gather"}, "more than one collective"},
      {{"all_reduce", "-x", "1"}, "unknown option '-x'"},
      {{"all_reduce", "--bogus=1"}, "unknown option '--bogus=1'"},
      {{"all_reduce", "-b"}, "-b needs a value"},
      {{"all_reduce", "-b", "12Q"}, "-b expects a size"},
      {{"all_reduce", "-e", "0"}, "-e must be at least 1 byte"},
      {{"all_reduce", "-b", "2M", "-e", "1M"}, "is larger than -e"},
      {{"all_reduce", "-f", "1"}, "-f expects an integer factor >= 2"},
      {{"all_reduce", "-f", "2", "-i", "8"}, "-f and -i cannot be used together"},
      {{"all_reduce", "-n", "0"}, "-n expects an integer"},
      {{"all_reduce", "-w", "-1"}, "-w expects an integer"},
      {{"all_reduce", "-c", "2"}, "-c expects 0 or 1"},
      {{"all_reduce", "-d", "float128"}, "-d expects one of"},
      {{"all_reduce", "-o", "xor"}, "-o expects one of"},
      {{"all_reduce", "-r", "-1"}, "-r expects an integer"},
      {{"all_reduce", "--algo="}, "--algo expects an algorithm name"},
      {{"all_reduce", "-z", "2"}, "-z expects 0 or 1, got '2'"},
      {{"all_reduce", "--blocking=yes"}, "-z expects 0 or 1"},
      {{"all_reduce", "-z"}, "-z needs a value"},
      {{"all_reduce", "-I", "on"}, "-I expects 0 or 1, got 'on'"},
      {{"all_reduce", "--percentiles"}, "-I needs a value"},
      {{"all_reduce", "--explain=1"}, "--explain takes no value"},
      {{"all_reduce", "--sweep-algos=ring"}, "--sweep-algos takes no value"},
      {{"all_reduce", "--sweep-algos", "--algo", "ring"}, "cannot be combined with --algo ring"},
      {{"all_reduce", "--sweep"}, "unknown option '--sweep'"},
  };
  for (const auto& c : kCases) {
    const ParsedOptions p = parse(c.args);
    EXPECT_FALSE(p.help);
    EXPECT_NE(p.error.find(c.reason), std::string::npos)
        << "error '" << p.error << "' does not contain '" << c.reason << "'";
  }
}

}  // namespace
}  // namespace chorus::bench
