// The selector as a pure function (algo/selector.h): the rule for selection bytes, what each
// registry entry supports, the order of precedence of choose(), and explain()'s candidates with
// their reasons. No process, no communicator.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "algo/registry.h"
#include "algo/selector.h"
#include "algo/tuner.h"
#include "chorus/error.h"

namespace chorus::algo {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

SelectContext one_host(int n) {
  SelectContext s;
  s.caps = {n, 1, true};
  return s;
}

const Candidate* find(const std::vector<Candidate>& cs, const std::string& name) {
  for (const Candidate& c : cs)
    if (to_string(c.variant) == name) return &c;
  return nullptr;
}

TEST(Selector, SelectionBytesCountTheWholeBufferOnlyForReduceScatterAndAllGather) {
  // 10 floats per call on 4 ranks.
  EXPECT_EQ(selection_bytes(Collective::kAllReduce, 10, DataType::kF32, 4), 40u);
  EXPECT_EQ(selection_bytes(Collective::kReduceScatter, 10, DataType::kF32, 4), 160u);
  EXPECT_EQ(selection_bytes(Collective::kAllGather, 10, DataType::kF32, 4), 160u);
  // Gather and scatter name one rank's block: that is what they select by.
  EXPECT_EQ(selection_bytes(Collective::kGather, 10, DataType::kF32, 4), 40u);
  EXPECT_EQ(selection_bytes(Collective::kScatter, 10, DataType::kF32, 4), 40u);
  EXPECT_EQ(selection_bytes(Collective::kBroadcast, 10, DataType::kF64, 4), 80u);
  // The inverse, at least one element.
  EXPECT_EQ(count_for_selection_bytes(Collective::kAllGather, 160, DataType::kF32, 4), 10u);
  EXPECT_EQ(count_for_selection_bytes(Collective::kGather, 40, DataType::kF32, 4), 10u);
  EXPECT_EQ(count_for_selection_bytes(Collective::kAllReduce, 2, DataType::kF32, 4), 1u);
  EXPECT_EQ(count_for_selection_bytes(Collective::kReduceScatter, 8, DataType::kF32, 4), 1u);
}

TEST(Selector, EntriesSayWhyTheyCannotRun) {
  const Capabilities one{4, 1, true}, two{4, 2, false}, no_buffer{4, 1, false};
  const AlgoEntry& hier = *find_algorithm(Collective::kAllReduce, Algorithm::kHier);
  const AlgoEntry& fanout = *find_algorithm(Collective::kBroadcast, Algorithm::kFanout);
  const AlgoEntry& ring = *find_algorithm(Collective::kAllReduce, Algorithm::kRing);
  // Hier runs anywhere (the selector offers it across hosts only).
  EXPECT_EQ(supports(hier, one), "");
  EXPECT_EQ(supports(hier, two), "");
  EXPECT_EQ(supports(fanout, one), "");
  EXPECT_TRUE(contains(supports(fanout, two), "span 2 hosts")) << supports(fanout, two);
  EXPECT_TRUE(contains(supports(fanout, no_buffer), "shared by every rank"));
  for (const Capabilities& c : {one, two, no_buffer}) EXPECT_EQ(supports(ring, c), "");
  // Every entry answers.
  for (const AlgoEntry& e : all_algorithms()) ASSERT_NE(e.supports, nullptr);
}

TEST(Selector, WithoutATableTheFixedThresholdsChoose) {
  SelectContext s = one_host(4);
  EXPECT_EQ(choose(s, Collective::kAllReduce, 64), Variant{Algorithm::kDirect});
  EXPECT_EQ(choose(s, Collective::kAllReduce, 64 << 10), Variant{Algorithm::kTree});
  EXPECT_EQ(choose(s, Collective::kAllReduce, 64 << 20), Variant{Algorithm::kRing});
  // Across hosts, the hierarchical all-reduce; in deterministic mode the rank-ordered ones.
  const std::vector<int> hosts = {0, 0, 1, 1};
  s.caps.hosts = 2;
  s.host_of = hosts;
  EXPECT_EQ(choose(s, Collective::kAllReduce, 64 << 20), Variant{Algorithm::kHier});
  s.deterministic = true;
  EXPECT_EQ(choose(s, Collective::kAllReduce, 64 << 20), Variant{Algorithm::kTwoShot});
}

TEST(Selector, TheTableChoosesOnOneHostOnly) {
  const TuneTable t = TuneTable::parse(
      "4 all_reduce direct 8:1 1000000:1000\n4 all_reduce ring 8:10 1000000:20\n", "test");
  SelectContext s = one_host(4);
  s.tune = &t;
  EXPECT_EQ(choose(s, Collective::kAllReduce, 8), Variant{Algorithm::kDirect});
  EXPECT_EQ(choose(s, Collective::kAllReduce, 1000000), Variant{Algorithm::kRing});
  const std::vector<int> hosts = {0, 0, 1, 1};
  s.caps.hosts = 2;
  s.host_of = hosts;
  EXPECT_EQ(choose(s, Collective::kAllReduce, 8), Variant{Algorithm::kDirect});  // fixed
  EXPECT_EQ(choose(s, Collective::kAllReduce, 1000000), Variant{Algorithm::kHier});
}

TEST(Selector, ATableDoesNotChooseAnAlgorithmThatCannotRun) {
  const TuneTable t = TuneTable::parse(
      "4 broadcast fanout 8:0.5 1000000:10\n4 broadcast direct 8:1 1000000:1000\n", "test");
  SelectContext s = one_host(4);
  s.tune = &t;
  EXPECT_EQ(choose(s, Collective::kBroadcast, 64), Variant{Algorithm::kFanout});
  s.caps.fans_out = false;  // the same host, a transport without the shared buffer
  EXPECT_EQ(choose(s, Collective::kBroadcast, 64), Variant{Algorithm::kDirect});
}

TEST(Selector, AForcedAlgorithmRunsWhereTheCollectiveHasIt) {
  SelectContext s = one_host(4);
  s.forced = Variant{Algorithm::kRing, Path::kFifo};
  EXPECT_EQ(use_of_forced(s, Collective::kAllReduce), ForcedUse::kRuns);
  EXPECT_EQ(choose(s, Collective::kAllReduce, 8), (Variant{Algorithm::kRing, Path::kFifo}));
  // Gather has no ring: chosen by size.
  EXPECT_EQ(use_of_forced(s, Collective::kGather), ForcedUse::kNone);
  EXPECT_EQ(choose(s, Collective::kGather, 8), Variant{Algorithm::kDirect});
  // Deterministic mode replaces it for the reductions it would not fold in rank order.
  s.deterministic = true;
  EXPECT_EQ(use_of_forced(s, Collective::kAllReduce), ForcedUse::kReplaced);
  EXPECT_EQ(choose(s, Collective::kAllReduce, 8), Variant{Algorithm::kDirect});
  EXPECT_EQ(use_of_forced(s, Collective::kAllGather), ForcedUse::kRuns);
}

TEST(Selector, AForcedAlgorithmThatCannotRunIsAClearError) {
  SelectContext s = one_host(4);
  s.caps.hosts = 2;
  s.forced = Variant{Algorithm::kFanout};
  try {
    (void)choose(s, Collective::kAllGather, 64);
    FAIL() << "a fanout across hosts was chosen";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "all_gather")) << what;
    EXPECT_TRUE(contains(what, "fanout cannot run")) << what;
    EXPECT_TRUE(contains(what, "span 2 hosts")) << what;
  }
  // The collectives without fanout are not concerned.
  EXPECT_EQ(choose(s, Collective::kAllReduce, 64), Variant{Algorithm::kDirect});
  // A fanout without the shared buffer, likewise; hier on one host runs when forced.
  s = one_host(4);
  s.caps.fans_out = false;
  s.forced = Variant{Algorithm::kFanout};
  EXPECT_THROW((void)choose(s, Collective::kBroadcast, 64), InvalidArgument);
  s.forced = Variant{Algorithm::kHier};
  EXPECT_EQ(choose(s, Collective::kAllReduce, 64), Variant{Algorithm::kHier});
  // One rank runs anything: its calls only copy.
  s = one_host(1);
  s.caps.hosts = 2;
  s.forced = Variant{Algorithm::kFanout};
  EXPECT_EQ(choose(s, Collective::kBroadcast, 64), Variant{Algorithm::kFanout});
}

TEST(Selector, ExplainGivesEveryCandidateItsReason) {
  const TuneTable t = TuneTable::parse(
      "2 all_reduce direct 8:1 1000000:1000\n2 all_reduce ring 8:10 1000000:20\n", "test");
  SelectContext s = one_host(2);
  s.tune = &t;
  std::vector<Candidate> cs = explain(s, Collective::kAllReduce, 8);
  // Every registered algorithm on both paths.
  EXPECT_EQ(cs.size(), 10u);
  ASSERT_TRUE(find(cs, "direct") && find(cs, "ring") && find(cs, "hier"));
  EXPECT_TRUE(find(cs, "direct")->chosen);
  EXPECT_EQ(find(cs, "direct")->reason, "");
  EXPECT_DOUBLE_EQ(*find(cs, "direct")->predicted_us, 1);
  EXPECT_DOUBLE_EQ(*find(cs, "ring")->predicted_us, 10);
  EXPECT_FALSE(find(cs, "tree")->predicted_us);
  EXPECT_TRUE(contains(find(cs, "hier")->reason, "across hosts"));
  // No single copy anywhere: the FIFO variants are the same as the plain ones.
  EXPECT_TRUE(contains(find(cs, "ring/fifo")->reason, "FIFO"));
  s.fifo_from_bytes = 32 << 10;
  cs = explain(s, Collective::kAllReduce, 8);
  EXPECT_EQ(find(cs, "ring/fifo")->reason, "");
  // Deterministic mode names the algorithms it leaves out.
  s.deterministic = true;
  cs = explain(s, Collective::kAllReduce, 8);
  EXPECT_TRUE(contains(find(cs, "ring")->reason, "rank order")) << find(cs, "ring")->reason;
  EXPECT_EQ(find(cs, "twoshot")->reason, "");
  // Fanout has one path.
  s.deterministic = false;
  cs = explain(s, Collective::kBroadcast, 8);
  EXPECT_TRUE(contains(find(cs, "fanout/fifo")->reason, "one path"));
  // A forced algorithm that cannot run: listed with its reason, nothing chosen, no throw.
  s.caps.hosts = 2;
  s.tune = nullptr;
  s.forced = Variant{Algorithm::kFanout};
  cs = explain(s, Collective::kBroadcast, 8);
  EXPECT_TRUE(contains(find(cs, "fanout")->reason, "one host"));
  EXPECT_TRUE(std::none_of(cs.begin(), cs.end(), [](const Candidate& c) { return c.chosen; }));
}

TEST(Selector, TheRootOfABroadcastPicksItsSendsPathByItsPlacement) {
  const TuneTable t = TuneTable::parse(
      "2 broadcast ring 8:1 1048576:100\n"
      "2 broadcast ring/fifo 8:1 1048576:200\n"
      "2 broadcast/in-place ring 8:1 1048576:200\n"
      "2 broadcast/in-place ring/fifo 8:1 1048576:100\n",
      "test");
  SelectContext s = one_host(2);
  s.tune = &t;
  s.fifo_from_bytes = 32 << 10;
  std::byte a[1], b[1];
  CollArgs out_of_place;
  out_of_place.coll = Collective::kBroadcast;
  out_of_place.send = a;
  out_of_place.recv = b;
  CollArgs in_place = out_of_place;
  in_place.send = b;
  const Variant fifo{Algorithm::kRing, Path::kFifo};
  EXPECT_FALSE(sends_through_fifo(s, out_of_place, 0, fifo, 1 << 20, false));
  EXPECT_TRUE(sends_through_fifo(s, in_place, 0, fifo, 1 << 20, false));
  // Not the root, on a device, below the threshold or forced: the agreed path.
  EXPECT_TRUE(sends_through_fifo(s, out_of_place, 1, fifo, 1 << 20, false));
  EXPECT_TRUE(sends_through_fifo(s, out_of_place, 0, fifo, 1 << 20, true));
  EXPECT_TRUE(sends_through_fifo(s, out_of_place, 0, fifo, 1024, false));
  s.forced = fifo;
  EXPECT_TRUE(sends_through_fifo(s, out_of_place, 0, fifo, 1 << 20, false));
}

}  // namespace
}  // namespace chorus::algo
