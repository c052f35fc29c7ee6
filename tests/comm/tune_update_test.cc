// How measured curves become a tune table: the fit (algo/tune_update.h), the merge into an
// existing table, and the same through the tools-facing API chorus-tune uses
// (chorus/tune_table.h).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "algo/tune_update.h"
#include "algo/tuner.h"
#include "chorus/error.h"
#include "chorus/tune_table.h"

namespace chorus {
namespace {

using algo::TuneTable;

TEST(TuneUpdate, TheFitIsNonDecreasingAndPoolsTheViolators) {
  std::vector<TuneTable::Point> c = {{8, 1}, {16, 3}, {32, 2}, {64, 5}, {128, 4}, {256, 4}};
  algo::fit_non_decreasing(c);
  const std::vector<double> want = {1, 2.5, 2.5, 13.0 / 3, 13.0 / 3, 13.0 / 3};
  ASSERT_EQ(c.size(), want.size());
  for (size_t i = 0; i < c.size(); ++i) {
    EXPECT_DOUBLE_EQ(c[i].us, want[i]) << "point " << i;
    if (i > 0) EXPECT_LE(c[i - 1].us, c[i].us);
  }
  EXPECT_EQ(c[2].bytes, 32u);  // sizes stay
  // Already non-decreasing: unchanged.
  std::vector<TuneTable::Point> up = {{8, 1}, {16, 1}, {32, 7}};
  algo::fit_non_decreasing(up);
  EXPECT_DOUBLE_EQ(up[0].us, 1);
  EXPECT_DOUBLE_EQ(up[1].us, 1);
  EXPECT_DOUBLE_EQ(up[2].us, 7);
  std::vector<TuneTable::Point> none;
  algo::fit_non_decreasing(none);
  EXPECT_TRUE(none.empty());
}

constexpr const char* kOld = R"(# an older table
2 all_reduce ring 8:10
2 all_reduce direct 8:1
2 broadcast/in-place ring 8:3
2 gather direct 8:2
4 all_reduce ring 8:20

)";

TEST(TuneUpdate, TheMergeReplacesWhatTheRunMeasuredAndKeepsTheRest) {
  TuneTable measured;
  measured.set(2, Collective::kAllReduce, algo::Algorithm::kRing, {{8, 9}});
  measured.set(2, Collective::kBroadcast, algo::Algorithm::kRing, {{8, 4}}, true);
  const Collective colls[] = {Collective::kAllReduce, Collective::kBroadcast};
  const std::string text = algo::merge_tune_text(kOld, measured, {2, colls, {}});
  // np=2 all_reduce and broadcast (in place too) replaced; gather and np=4 kept; no comments.
  EXPECT_EQ(text, "2 gather direct 8:2\n4 all_reduce ring 8:20\n" + measured.format());
  // Only the variants the run measured: direct keeps its old curve.
  const std::string ring[] = {"ring"};
  const std::string partial = algo::merge_tune_text(kOld, measured, {2, colls, ring});
  EXPECT_NE(partial.find("2 all_reduce direct 8:1\n"), std::string::npos) << partial;
  EXPECT_EQ(partial.find("2 all_reduce ring 8:10"), std::string::npos) << partial;
  // The merged text is a table again.
  EXPECT_TRUE(TuneTable::parse(text, "merged").covers(4, Collective::kAllReduce));
}

TEST(TuneUpdate, TheToolsApiFitsMergesAndSummarises) {
  MeasuredTable m;
  EXPECT_TRUE(m.empty());
  m.add(2, Collective::kAllReduce, "ring/fifo", {{8, 5}, {64, 4}, {512, 6}});
  EXPECT_FALSE(m.empty());
  EXPECT_EQ(m.format(), "2 all_reduce ring/fifo 8:4.5 64:4.5 512:6\n");
  EXPECT_THROW(m.add(2, Collective::kAllReduce, "spiral", {{8, 1}}), InvalidArgument);
  EXPECT_TRUE(is_algorithm_name("ring/fifo"));
  EXPECT_FALSE(is_algorithm_name("spiral"));

  const Collective colls[] = {Collective::kAllReduce};
  const std::string text = m.merge_into(kOld, 2, colls, {});
  EXPECT_EQ(text.find("2 all_reduce ring 8:10"), std::string::npos) << text;
  EXPECT_NE(text.find("2 gather direct 8:2"), std::string::npos) << text;

  const std::string path = ::testing::TempDir() + "tune_update_test.txt";
  std::ofstream(path) << text;
  const TableSummary s = summarize_tune_table(path);
  EXPECT_EQ(s.origin, path);
  bool found = false;
  for (const CurveSummary& c : s.curves)
    if (c.world_size == 2 && c.collective == "all_reduce" && c.algorithm == "ring/fifo") {
      found = true;
      EXPECT_DOUBLE_EQ(c.alpha_us, 4.5);
      EXPECT_EQ(c.points, 3);
    }
  EXPECT_TRUE(found);
  // np=2 all_reduce replaced by ring/fifo; broadcast/in-place, gather and np=4 ring kept.
  EXPECT_EQ(s.curves.size(), 4u);
}

// The constants are filed under the link named; another link's entries stay, an unknown link is
// refused by name.
TEST(TuneUpdate, FitsTheConstantsUnderTheLinkNamed) {
  MeasuredTable m;
  m.add(2, Collective::kAllReduce, "ring", {{8, 5}, {64, 5}, {512, 6}});
  const std::string shm = m.fit_costs_into({});
  EXPECT_EQ(shm.rfind("shm 2 all_reduce ring 0 ", 0), 0u) << shm;
  const std::string both = m.fit_costs_into(shm, "ucx");
  EXPECT_NE(both.find("shm 2 all_reduce ring 0 "), std::string::npos) << both;
  EXPECT_NE(both.find("ucx 2 all_reduce ring 0 "), std::string::npos) << both;
  // chorus-tune --device: the IPC path's own lines, beside the host's.
  const std::string three = m.fit_costs_into(both, "ipc");
  EXPECT_NE(three.find("ipc 2 all_reduce ring 0 "), std::string::npos) << three;
  EXPECT_NE(three.find("shm 2 all_reduce ring 0 "), std::string::npos) << three;
  try {
    (void)m.fit_costs_into({}, "nvlink");
    ADD_FAILURE() << "an unknown link was taken";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown link 'nvlink'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace chorus
