// The cost model (algo/cost_model.h) and its fit (algo/cost_fit.h), and the selector choosing by
// it: the forms' step counts, the text format, least squares recovering known constants, and on
// the fitted constants of a 64-core host (tests/data/comm/cost-64-core-host.txt) the selector's
// choice at every size is the model's argmin, flipping exactly at the crossover sizes computed here
// by hand from the fixture's constants. No process, no communicator.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "algo/cost_fit.h"
#include "algo/cost_model.h"
#include "algo/registry.h"
#include "algo/selector.h"
#include "chorus/error.h"

namespace chorus::algo {
namespace {

constexpr double kMiB = 1 << 20;

CostModel fixture() {
  const std::string path = CHORUS_COMM_FIXTURES "/cost-64-core-host.txt";
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  return CostModel::parse(text.str(), path);
}

SelectContext on_one_host(int n, const CostModel& m) {
  SelectContext s;
  s.caps = {n, 1, true};
  s.model = &m;
  return s;
}

// Where a x s + b x f x bytes of one algorithm meets another's (bytes), from the constants alone.
double crossover(double a1, double s1, double b1, double f1, double a2, double s2, double b2,
                 double f2) {
  return (a2 * s2 - a1 * s1) / (b1 * f1 - b2 * f2) * kMiB;
}

TEST(CostModel, FormsCountTheAlgorithmsSteps) {
  const Placement p8{8, 1};
  const auto ring = form_of(Collective::kAllReduce, Algorithm::kRing, p8);
  ASSERT_TRUE(ring);
  EXPECT_EQ(ring->count, 1);
  EXPECT_DOUBLE_EQ(ring->terms[0].steps, 14);            // 2(N-1)
  EXPECT_DOUBLE_EQ(ring->terms[0].factor, 3.0 * 7 / 8);  // 2(N-1)/N moved, (N-1)/N reduced
  EXPECT_DOUBLE_EQ(form_of(Collective::kAllReduce, Algorithm::kTree, p8)->terms[0].steps, 6);
  EXPECT_DOUBLE_EQ(form_of(Collective::kAllReduce, Algorithm::kTwoShot, p8)->terms[0].steps, 2);
  EXPECT_DOUBLE_EQ(form_of(Collective::kAllReduce, Algorithm::kDirect, p8)->terms[0].factor, 14);
  EXPECT_DOUBLE_EQ(form_of(Collective::kAllGather, Algorithm::kRing, p8)->terms[0].steps, 7);
  EXPECT_DOUBLE_EQ(form_of(Collective::kBroadcast, Algorithm::kTree, p8)->terms[0].steps, 3);
  // hier: within hosts over shm, across them over the network; only where hosts > 1.
  EXPECT_FALSE(form_of(Collective::kAllReduce, Algorithm::kHier, p8));
  const auto hier = form_of(Collective::kAllReduce, Algorithm::kHier, Placement{8, 2});
  ASSERT_TRUE(hier);
  ASSERT_EQ(hier->count, 2);
  EXPECT_EQ(hier->terms[0].link, Link::kShm);
  EXPECT_EQ(hier->terms[1].link, Link::kUcx);
  EXPECT_DOUBLE_EQ(hier->terms[1].steps, 2);  // a ring of 2 hosts
  // A flat algorithm across hosts crosses the network; fanout needs one host.
  EXPECT_EQ(form_of(Collective::kAllReduce, Algorithm::kRing, Placement{8, 2})->terms[0].link,
            Link::kUcx);
  EXPECT_FALSE(form_of(Collective::kBroadcast, Algorithm::kFanout, Placement{8, 2}));
  EXPECT_FALSE(form_of(Collective::kGather, Algorithm::kDirect, p8));  // nothing to choose
}

TEST(CostModel, TextRoundTripsAndBadLinesAreNamed) {
  const CostModel m = fixture();
  const CostModel again = CostModel::parse(m.format(), "again");
  EXPECT_EQ(again.format(), m.format());
  const auto bad = [](const std::string& text, const std::string& part) {
    try {
      CostModel::parse(text, "t");
      ADD_FAILURE() << "no error for: " << text;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  bad("shm 2 all_reduce ring 0 1\n", "line 1");
  bad("# c\nnvlink 2 all_reduce ring 0 1 2\n", "line 2: unknown transport 'nvlink'");
  bad("shm 1 all_reduce ring 0 1 2\n", "bad world size 1");
  bad("shm 2 all_reduce fanout 0 1 2\n", "no algorithm 'fanout' for all_reduce");
  bad("shm 2 all_reduce ring 0 -1 2\n", "not negative");
  bad("shm 2 all_reduce ring 0 1 2 3\n", "unexpected '3'");
  bad("shm 2 all_reduce ring 100 1 2\n", "no size band starts at 100");
}

TEST(CostModel, LeastSquaresRecoversTheConstants) {
  const Placement p{4, 1};
  const auto form = form_of(Collective::kAllReduce, Algorithm::kRing, p);
  std::vector<TuneTable::Point> curve;
  for (size_t b : {size_t(8), size_t(1024), size_t(32768), size_t(1) << 20, size_t(16) << 20})
    curve.push_back({b, 0.7 * form->terms[0].steps +
                            180.0 * form->terms[0].factor * static_cast<double>(b) / kMiB});
  const auto c = fit_constants(Collective::kAllReduce, Variant{Algorithm::kRing}, p, curve);
  ASSERT_TRUE(c);
  EXPECT_NEAR(c->alpha_us, 0.7, 1e-6);
  EXPECT_NEAR(c->beta_us_per_mib, 180.0, 1e-6);
  // Times that fall with size (noise) would fit a negative beta: alpha alone instead.
  const std::vector<TuneTable::Point> falling{{8, 5.0}, {1 << 20, 4.0}};
  const auto flat = fit_constants(Collective::kAllReduce, Variant{Algorithm::kRing}, p, falling);
  ASSERT_TRUE(flat);
  EXPECT_GT(flat->alpha_us, 0);
  EXPECT_EQ(flat->beta_us_per_mib, 0);
  // A table's curves become a model of the same constants, band by band: a curve whose slope
  // doubles from 1 MiB (out of cache) gets that band's beta.
  for (TuneTable::Point& pt : curve)
    if (pt.bytes >= (size_t(1) << 20))
      pt.us += 180.0 * form->terms[0].factor * static_cast<double>(pt.bytes) / kMiB;
  curve.push_back(
      {size_t(64) << 20, 0.7 * form->terms[0].steps + 360.0 * form->terms[0].factor * 64});
  TuneTable t;
  t.set(4, Collective::kAllReduce, Variant{Algorithm::kRing}, curve);
  const CostModel m = fit_model(t, Link::kShm);
  const Variant ring{Algorithm::kRing};
  const auto small = m.constants(Link::kShm, 4, Collective::kAllReduce, ring, 1024);
  const auto large = m.constants(Link::kShm, 4, Collective::kAllReduce, ring, 32 << 20);
  ASSERT_TRUE(small && large);
  EXPECT_NEAR(small->alpha_us, 0.7, 1e-6);
  EXPECT_NEAR(small->beta_us_per_mib, 180.0, 1e-6);
  EXPECT_NEAR(large->beta_us_per_mib, 360.0, 1e-6);
}

// The fixture's 64-rank all-reduce: direct, then tree, then twoshot, then ring, each from the
// size where its line crosses the previous one's.
TEST(CostModel, TheSelectorPicksTheArgminAndFlipsAtTheCrossovers64Ranks) {
  const CostModel m = fixture();
  const SelectContext s = on_one_host(64, m);
  const double n = 64, share = 63.0 / 64;
  // (alpha, steps, beta, factor) of each algorithm at 64 ranks, from the fixture.
  const double direct[] = {6, 1, 80, 2 * (n - 1)};
  const double tree[] = {1.4, 12, 150, 3};
  const double twoshot[] = {9, 2, 130, 3 * share};
  const double ring[] = {1.2, 2 * (n - 1), 100, 3 * share};
  const auto cross = [](const double* x, const double* y) {
    return crossover(x[0], x[1], x[2], x[3], y[0], y[1], y[2], y[3]);
  };
  const double to_tree = cross(direct, tree), to_twoshot = cross(tree, twoshot),
               to_ring = cross(twoshot, ring);
  ASSERT_LT(to_tree, to_twoshot);
  ASSERT_LT(to_twoshot, to_ring);
  const auto at = [&](double bytes) {
    return std::string(to_string(choose(s, Collective::kAllReduce, static_cast<size_t>(bytes))));
  };
  EXPECT_EQ(at(8), "direct");
  EXPECT_EQ(at(to_tree * 0.98), "direct");
  EXPECT_EQ(at(to_tree * 1.02), "tree");
  EXPECT_EQ(at(to_twoshot * 0.98), "tree");
  EXPECT_EQ(at(to_twoshot * 1.02), "twoshot");
  EXPECT_EQ(at(to_ring * 0.98), "twoshot");
  EXPECT_EQ(at(to_ring * 1.02), "ring");
  EXPECT_EQ(at(256 * kMiB), "ring");
  // At every size the choice is the candidate explain() predicts fastest.
  for (size_t b = 8; b <= (size_t(256) << 20); b *= 2) {
    const auto cands = explain(s, Collective::kAllReduce, b);
    const Candidate* best = nullptr;
    const Candidate* chosen = nullptr;
    for (const Candidate& c : cands) {
      if (c.chosen) chosen = &c;
      if (!c.reason.empty() || !c.predicted_us) continue;
      if (best == nullptr || *c.predicted_us < *best->predicted_us) best = &c;
    }
    ASSERT_NE(chosen, nullptr) << b;
    ASSERT_NE(best, nullptr) << b;
    EXPECT_EQ(chosen->variant, best->variant) << b << " bytes";
  }
  // Broadcast at 64 ranks: direct is the fastest fitted one for small messages, the ring's
  // bandwidth wins for large ones (fanout, fitted slow here, never does).
  EXPECT_EQ(to_string(choose(s, Collective::kBroadcast, 8)), "direct");
  EXPECT_EQ(to_string(choose(s, Collective::kBroadcast, 64 << 20)), "ring");
}

// The fixture's 8-rank constants, used at 16 ranks too (the nearest fitted world size) with the
// form at 16; the FIFO variant only where messages can go single copy.
TEST(CostModel, NearestWorldSizeAndTheFifoPath) {
  const CostModel m = fixture();
  SelectContext s = on_one_host(8, m);
  s.fifo_from_bytes = 64 << 10;
  // Below the single-copy threshold ring/fifo is no candidate, whatever it predicts.
  EXPECT_NE(to_string(choose(s, Collective::kAllReduce, 32 << 10)), "ring/fifo");
  EXPECT_EQ(to_string(choose(s, Collective::kAllReduce, 64 << 20)), "ring/fifo");
  s.fifo_from_bytes = 0;  // nothing single copy: no FIFO variants
  EXPECT_EQ(to_string(choose(s, Collective::kAllReduce, 64 << 20)), "ring");
  const auto c16 =
      m.constants(Link::kShm, 16, Collective::kAllReduce, Variant{Algorithm::kTree}, 1 << 20);
  ASSERT_TRUE(c16);
  EXPECT_DOUBLE_EQ(c16->alpha_us, 1.1);  // 8's, not 64's
  // The candidates at a world size are those fitted at the nearest one: ring/fifo, fitted at 8
  // only, is none at 64.
  EXPECT_FALSE(m.constants(Link::kShm, 64, Collective::kAllReduce,
                           Variant{Algorithm::kRing, Path::kFifo}, 64 << 20));
  const auto t16 =
      m.predict_us(Collective::kAllReduce, Variant{Algorithm::kTree}, Placement{16, 1}, 1 << 20);
  EXPECT_DOUBLE_EQ(*t16, 1.1 * 8 + 140 * 3);  // 2 log2(16) steps, factor 3, 1 MiB
  // A collective fitted for some variants: only those are candidates (broadcast at 64 has no
  // direct/fifo line, reduce none at all: the defaults).
  EXPECT_FALSE(m.constants(Link::kShm, 64, Collective::kBroadcast,
                           Variant{Algorithm::kDirect, Path::kFifo}, 8));
  EXPECT_TRUE(m.constants(Link::kShm, 64, Collective::kReduce, Variant{Algorithm::kRing}, 8));
  // Deterministic mode: only the rank-ordered algorithms.
  s.deterministic = true;
  EXPECT_EQ(to_string(choose(s, Collective::kAllReduce, 64 << 20)), "twoshot");
  EXPECT_EQ(to_string(choose(s, Collective::kAllReduce, 8)), "direct");
}

// In-place constants: all_reduce and broadcast are chosen by them where the collective has any on
// the link (at 512 KiB in place the single-copy twoshot cost 82 us and ring/fifo 53, against 50
// and 54 out of place, on two ranks of an Intel Xeon), the other collectives and a collective
// without them by the out-of-place ones; the text round-trips them.
TEST(CostModel, InPlaceConstantsChooseAllReduceAndBroadcast) {
  const std::string text =
      "shm 2 all_reduce twoshot 32768 1 90\n"              // 2 steps, 1/2 x 3: ~70 us at 512 KiB
      "shm 2 all_reduce ring/fifo 32768 1 100\n"           // ~77 us
      "shm 2 all_reduce/in-place twoshot 32768 1 150\n"    // ~114 us
      "shm 2 all_reduce/in-place ring/fifo 32768 1 100\n"  // ~77 us
      "shm 2 reduce_scatter twoshot 32768 1 90\n";
  const CostModel m = CostModel::parse(text, "t");
  EXPECT_EQ(CostModel::parse(m.format(), "again").format(), m.format());
  EXPECT_NE(m.format().find("shm 2 all_reduce/in-place ring/fifo 32768 "), std::string::npos)
      << m.format();
  SelectContext s = on_one_host(2, m);
  s.fifo_from_bytes = 64 << 10;
  EXPECT_EQ(to_string(choose(s, Collective::kAllReduce, 512 << 10)), "ring/fifo");
  const auto out_of_place =
      m.constants(Link::kShm, 2, Collective::kAllReduce, Variant{Algorithm::kTwoShot}, 512 << 10);
  const auto in_place = m.constants(Link::kShm, 2, Collective::kAllReduce,
                                    Variant{Algorithm::kTwoShot}, 512 << 10, true);
  ASSERT_TRUE(out_of_place && in_place);
  EXPECT_DOUBLE_EQ(out_of_place->beta_us_per_mib, 90);
  EXPECT_DOUBLE_EQ(in_place->beta_us_per_mib, 150);
  // Without in-place lines for it, a collective's in-place calls use the out-of-place ones.
  const auto rs = m.constants(Link::kShm, 2, Collective::kReduceScatter,
                              Variant{Algorithm::kTwoShot}, 512 << 10, true);
  ASSERT_TRUE(rs);
  EXPECT_DOUBLE_EQ(rs->beta_us_per_mib, 90);
  // Out of place alone, twoshot is the choice: the in-place lines decided.
  const CostModel out_only =
      CostModel::parse(text.substr(0, text.find("shm 2 all_reduce/in-place")), "out");
  EXPECT_EQ(to_string(choose(on_one_host(2, out_only), Collective::kAllReduce, 512 << 10)),
            "twoshot");
  // A world size measured only out of place keeps its own constants for in-place calls.
  const CostModel at8 = CostModel::parse(text + "shm 8 all_reduce twoshot 32768 7 70\n", "at8");
  const auto c8 = at8.constants(Link::kShm, 8, Collective::kAllReduce, Variant{Algorithm::kTwoShot},
                                512 << 10, true);
  ASSERT_TRUE(c8);
  EXPECT_DOUBLE_EQ(c8->beta_us_per_mib, 70);
  const auto c3 = at8.constants(Link::kShm, 3, Collective::kAllReduce, Variant{Algorithm::kTwoShot},
                                512 << 10, true);
  ASSERT_TRUE(c3);
  EXPECT_DOUBLE_EQ(c3->beta_us_per_mib, 150);  // 2's in-place, nearer than 8
  EXPECT_TRUE(chosen_in_place(Collective::kAllReduce));
  EXPECT_TRUE(chosen_in_place(Collective::kBroadcast));
  EXPECT_FALSE(chosen_in_place(Collective::kReduceScatter));
  EXPECT_TRUE(probed_in_place(Collective::kAllReduce));
  EXPECT_FALSE(probed_in_place(Collective::kBroadcast));
}

// A call on device buffers that move by IPC is chosen by the IPC path's constants (chorus-tune
// --device) where its collective has some: by the model alone, though a tune table chooses host
// calls, and among single-copy variants (a device message takes one path). A collective without
// them is chosen as on host buffers.
TEST(CostModel, DeviceBuffersOnIpcAreChosenByTheIpcConstants) {
  const std::string text =
      "shm 2 all_reduce direct 32768 1 100\n"    // 1 + 100 x 2 x 0.5 = 101 us at 512 KiB
      "shm 2 all_reduce ring 32768 1 300\n"      // 2 + 300 x 1.5 x 0.5 = 227 us
      "ipc 2 all_reduce direct 32768 30 400\n"   // 30 + 400 x 2 x 0.5 = 430 us
      "ipc 2 all_reduce ring 32768 5 50\n"       // 10 + 50 x 1.5 x 0.5 = 47.5 us
      "ipc 2 all_reduce ring/fifo 32768 1 1\n";  // the cheapest, but no device message takes it
  const CostModel m = CostModel::parse(text, "t");
  EXPECT_TRUE(m.fitted(Link::kDeviceIpc, Collective::kAllReduce));
  EXPECT_FALSE(m.fitted(Link::kDeviceIpc, Collective::kBroadcast));
  EXPECT_TRUE(m.fitted(Link::kShm, Collective::kAllReduce));
  SelectContext s = on_one_host(2, m);
  s.fifo_from_bytes = 64 << 10;
  // Host calls see a table that prefers twoshot; device calls priced on IPC do not.
  const TuneTable t = TuneTable::parse(
      "2 all_reduce twoshot 8:1 1000000:5\n2 all_reduce ring 8:10 1000000:2000\n", "test");
  EXPECT_EQ(to_string(choose(s, Collective::kAllReduce, 512 << 10)), "direct");
  EXPECT_EQ(to_string(choose(s, Collective::kAllReduce, 512 << 10, true)), "ring");
  s.tune = &t;
  EXPECT_EQ(to_string(choose(s, Collective::kAllReduce, 512 << 10)), "twoshot");
  EXPECT_EQ(to_string(choose(s, Collective::kAllReduce, 512 << 10, true)), "ring");
  EXPECT_TRUE(priced_on_ipc(s, Collective::kAllReduce));
  // What explain() shows for the device call: the IPC predictions, and one path.
  bool saw_ring = false, saw_fifo = false;
  for (const Candidate& c : explain(s, Collective::kAllReduce, 512 << 10, true)) {
    if (c.variant == Variant{Algorithm::kRing}) {
      saw_ring = true;
      EXPECT_TRUE(c.chosen);
      ASSERT_TRUE(c.predicted_us);
      EXPECT_NEAR(*c.predicted_us, 47.5, 1e-9);
    }
    if (c.variant == Variant{Algorithm::kRing, Path::kFifo}) {
      saw_fifo = true;
      EXPECT_NE(c.reason.find("device buffers"), std::string::npos) << c.reason;
    }
  }
  EXPECT_TRUE(saw_ring && saw_fifo);
  // Broadcast has no IPC constants: its device calls are chosen as its host calls are.
  EXPECT_FALSE(priced_on_ipc(s, Collective::kBroadcast));
  for (size_t bytes : {size_t(8), size_t(64) << 10, size_t(8) << 20})
    EXPECT_EQ(choose(s, Collective::kBroadcast, bytes, true),
              choose(s, Collective::kBroadcast, bytes));
  // Without ipc lines a device call is still chosen among single-copy variants: here the host's
  // constants choose ring/fifo, and a device call the best one-path variant by the same ones.
  const CostModel host_only = CostModel::parse(
      "shm 2 all_reduce ring/fifo 32768 1 100\n"  // 2 + 100 x 0.75 = 77 us at 512 KiB
      "shm 2 all_reduce ring 32768 1 300\n"       // 227 us
      "shm 2 all_reduce direct 32768 1 400\n",    // 401 us
      "host only");
  SelectContext host = on_one_host(2, host_only);
  host.fifo_from_bytes = 64 << 10;
  EXPECT_EQ(to_string(choose(host, Collective::kAllReduce, 512 << 10)), "ring/fifo");
  EXPECT_EQ(to_string(choose(host, Collective::kAllReduce, 512 << 10, true)), "ring");
  for (const Candidate& c : explain(host, Collective::kAllReduce, 512 << 10, true))
    if (c.variant == Variant{Algorithm::kRing, Path::kFifo})
      EXPECT_NE(c.reason.find("device buffers"), std::string::npos) << c.reason;
  // Nor without a model.
  SelectContext fixed = s;
  fixed.model = nullptr;
  fixed.tune = nullptr;
  EXPECT_FALSE(priced_on_ipc(fixed, Collective::kAllReduce));
  EXPECT_EQ(choose(fixed, Collective::kAllReduce, 512 << 10, true),
            choose(fixed, Collective::kAllReduce, 512 << 10));
}

// Without fitted constants every algorithm shares the transport's defaults and the form alone
// chooses: direct below about 16 KiB at 2 ranks (its one step against the others' two), a
// bandwidth-optimal form above; forms that tie, the fixed rule; across hosts, hier for large
// all-reduces.
TEST(CostModel, TheDefaultsChooseByTheFormAlone) {
  CostModel none;
  none.origin = "defaults";
  const SelectContext s = on_one_host(2, none);
  EXPECT_EQ(to_string(choose(s, Collective::kAllReduce, 8 << 10)), "direct");
  EXPECT_EQ(to_string(choose(s, Collective::kAllReduce, 32 << 10)), "ring");
  // At 2 ranks every broadcast is one step of the whole buffer: the fixed rule breaks the tie.
  EXPECT_EQ(to_string(choose(s, Collective::kBroadcast, 8)), "direct");
  EXPECT_EQ(to_string(choose(s, Collective::kBroadcast, 8 << 20)), "ring");
  // At 4 ranks the one-step reduce-scatters beat the ring's three at every size.
  EXPECT_EQ(to_string(choose(on_one_host(4, none), Collective::kReduceScatter, 64 << 20)),
            "direct");
  SelectContext across = s;
  const std::vector<int> host_of{0, 0, 0, 0, 1, 1, 1, 1};
  across.caps = {8, 2, false};
  across.host_of = host_of;
  EXPECT_EQ(to_string(choose(across, Collective::kAllReduce, 1 << 20)), "hier");
  EXPECT_EQ(to_string(choose(across, Collective::kAllReduce, 8)), "direct");
  // The device IPC path has a form but no defaults: nothing to predict until measured.
  EXPECT_FALSE(default_link_cost(Link::kDeviceIpc));
  EXPECT_FALSE(none.predict_us(Collective::kAllReduce, Variant{Algorithm::kRing},
                               Placement{2, 1, Link::kDeviceIpc}, 1024));
}

}  // namespace
}  // namespace chorus::algo
