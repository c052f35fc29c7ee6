// The one mechanism that chooses GEMM kernels by measurement (tensor/gemm/selection.h): the f32
// backend and the autocast bf16 method per shape class both go through its timing rounds, rule
// and cache (shown with fake timings, which only that mechanism reads), and the pinned choice of
// the deterministic mode ignores every timing.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "chorus/error.h"
#include "chorus/tensor/gemm.h"
#include "gemm/backend.h"
#include "gemm/selection.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace chorus::tensor {
namespace {

using gemm_impl::set_fake_timings;

constexpr const char* kClasses[] = {"nn.small", "nn.large", "nt.small", "nt.large",
                                    "tn.small", "tn.large", "tt.small", "tt.large"};

bool available(const std::string& backend) {
  for (const auto& b : gemm_backends())
    if (b.name == backend) return b.available;
  return false;
}

// The knobs force choices past any timing: these tests need them at auto.
bool knobs_at_auto() {
  for (const char* knob : {"CHORUS_TENSOR_GEMM", "CHORUS_TENSOR_BF16_GEMM"}) {
    const char* v = std::getenv(knob);
    if (v != nullptr && std::string(v) != "auto" && std::string(v) != "") return false;
  }
  return true;
}

// Fake timings by candidate name (1.0 for the others), or by selection and name, recording what
// each selection timed.
class Faked {
 public:
  explicit Faked(std::map<std::string, double> seconds)
      : Faked([seconds](const std::string&, const std::string& name) {
          const auto it = seconds.find(name);
          return it == seconds.end() ? 1.0 : it->second;
        }) {}
  explicit Faked(gemm_impl::FakeTimings fake) : fake_(std::move(fake)) {
    previous_ = set_fake_timings([this](const std::string& selection, const std::string& name) {
      std::lock_guard lock(mutex_);
      timed_.insert(selection);
      return fake_(selection, name);
    });
  }
  ~Faked() { set_fake_timings(previous_); }
  std::set<std::string> timed() {
    std::lock_guard lock(mutex_);
    return timed_;
  }

 private:
  gemm_impl::FakeTimings fake_;
  std::mutex mutex_;
  std::set<std::string> timed_;
  gemm_impl::FakeTimings previous_;
};

// Restores both choices as they were.
struct KeepChoices {
  std::string f32 = gemm_backend(), bf16 = bf16_gemm_mode();
  ~KeepChoices() {
    set_gemm_backend(f32);
    set_bf16_gemm_mode(bf16);
  }
};

TEST(GemmSelection, BothDtypesChooseThroughTheOneMechanism) {
  if (!knobs_at_auto()) GTEST_SKIP() << "a CHORUS_TENSOR_*GEMM knob forces the choice";
  const KeepChoices keep;
  const std::string library = available("openblas") ? "openblas" : available("dnnl") ? "dnnl" : "";
  {
    // f32: a library twice as fast as builtin wins; within the 3% margin builtin (first) stays.
    Faked fake({{"builtin", 2.0}, {"dnnl", 1.0}, {"openblas", 1.0}});
    set_gemm_backend("auto");
    EXPECT_EQ(gemm_backend(), library.empty() ? "builtin" : (available("dnnl") ? "dnnl" : library));
    // Every shape class timed by the same mechanism.
    const std::set<std::string> timed = fake.timed();
    EXPECT_EQ(timed.size(), 8u);
    for (const char* c : kClasses) EXPECT_EQ(timed.count(std::string("f32 gemm ") + c), 1u) << c;
  }
  {
    Faked fake({{"builtin", 1.02}, {"dnnl", 1.0}, {"openblas", 1.0}});
    set_gemm_backend("auto");
    EXPECT_EQ(gemm_backend(), "builtin");
  }
  {
    // bf16: every class timed by the same mechanism; f32 on widened operands fastest, the
    // all-f32 plan slower, so every class runs f32.
    Faked fake({{"native", 5.0}, {"dnnl", 5.0}, {"f32", 1.0}, {"f32 on f32 operands", 10.0}});
    set_bf16_gemm_mode("auto");
    EXPECT_EQ(bf16_gemm_mode(), "f32");
    const std::set<std::string> timed = fake.timed();
    EXPECT_EQ(timed.size(), 8u);
    for (const char* c : kClasses) EXPECT_EQ(timed.count(std::string("bf16 gemm ") + c), 1u) << c;
  }
  {
    // A class left to measurement is timed, a forced one is not.
    Faked fake({{"f32", 1.0}, {"f32 on f32 operands", 10.0}});
    set_bf16_gemm_mode(
        "nn.small=f32,nn.large=f32,nt.small=f32,nt.large=f32,tn.small=f32,"
        "tn.large=f32,tt.small=f32");
    EXPECT_EQ(fake.timed(), std::set<std::string>{"bf16 gemm tt.large"});
  }
  if (gemm_impl::dnnl_bf16_available()) {
    // A faster method wins its classes.
    Faked fake({{"native", 5.0}, {"dnnl", 1.0}, {"f32", 2.0}, {"f32 on f32 operands", 10.0}});
    set_bf16_gemm_mode("auto");
    EXPECT_EQ(bf16_gemm_mode(), "dnnl");
  }
}

TEST(GemmSelection, F32BackendIsChosenPerShapeClass) {
  if (!knobs_at_auto()) GTEST_SKIP() << "a CHORUS_TENSOR_*GEMM knob forces the choice";
  if (!available("dnnl") || !available("openblas")) GTEST_SKIP() << "needs dnnl and openblas";
  const KeepChoices keep;
  // dnnl wins the nt classes, openblas the tn ones, builtin (first in the order) the others.
  auto fake_winners = [](const std::string& selection, const std::string& name) {
    if (selection.rfind("f32 gemm nt.", 0) == 0) return name == "dnnl" ? 1.0 : 2.0;
    if (selection.rfind("f32 gemm tn.", 0) == 0) return name == "openblas" ? 1.0 : 2.0;
    return 1.0;
  };
  const std::string plan =
      "nn.small=builtin,nn.large=builtin,nt.small=dnnl,nt.large=dnnl,tn.small=openblas,"
      "tn.large=openblas,tt.small=builtin,tt.large=builtin";
  {
    Faked fake(fake_winners);
    set_gemm_backend("auto");
    EXPECT_EQ(gemm_backend(), plan);
    // The deterministic mode's rule replaces a measured plan: builtin in every class.
    pin_gemm_choices();
    EXPECT_EQ(gemm_backend(), "builtin");
  }
  {
    // The decision string is what the ranks' agreement sets back: nothing is timed, the plan
    // comes back unchanged, and pinning keeps a set plan.
    Faked fake(std::map<std::string, double>{});
    set_gemm_backend("builtin");
    EXPECT_EQ(gemm_backend(), "builtin");
    set_gemm_backend(plan);
    EXPECT_EQ(gemm_backend(), plan);
    pin_gemm_choices();
    EXPECT_EQ(gemm_backend(), plan);
    EXPECT_TRUE(fake.timed().empty());
  }
  {
    // One name forces every class; a list forces its classes and measures only the others.
    Faked fake(fake_winners);
    set_gemm_backend("openblas");
    EXPECT_EQ(gemm_backend(), "openblas");
    EXPECT_TRUE(fake.timed().empty());
    set_gemm_backend("nt.large=openblas,tn.small=dnnl");
    EXPECT_EQ(gemm_backend(),
              "nn.small=builtin,nn.large=builtin,nt.small=dnnl,nt.large=openblas,tn.small=dnnl,"
              "tn.large=openblas,tt.small=builtin,tt.large=builtin");
    const std::set<std::string> timed = fake.timed();
    EXPECT_EQ(timed.size(), 6u);
    EXPECT_EQ(timed.count("f32 gemm nt.large"), 0u);
    EXPECT_EQ(timed.count("f32 gemm tn.small"), 0u);
  }
  // A malformed plan is refused, naming what is wrong, and the plan in use stays.
  set_gemm_backend(plan);
  auto message = [](const std::string& bad) {
    try {
      set_gemm_backend(bad);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("nt.huge=dnnl").find("unknown shape class 'nt.huge'"), std::string::npos);
  EXPECT_NE(message("nt.large=cublas").find("'cublas' is not"), std::string::npos);
  EXPECT_NE(message("fastest").find("'fastest' is not"), std::string::npos);
  EXPECT_NE(message("nt.large=dnnl,tn.large").find("expected class=name in 'tn.large'"),
            std::string::npos);
  EXPECT_EQ(gemm_backend(), plan);
}

TEST(GemmSelection, PinnedChoiceIsTheRuleWhateverTheTimings) {
  if (!knobs_at_auto()) GTEST_SKIP() << "a CHORUS_TENSOR_*GEMM knob forces the choice";
  const KeepChoices keep;
  const std::string rule_bf16 = gemm_impl::blocked_bf16_available() ? "native" : "f32";
  for (int run = 0; run < 2; ++run) {
    // Timings that favour another choice each run: a measured choice gives way to the rule, and
    // pinning times nothing.
    Faked fake(run == 0
                   ? std::map<std::string, double>{{"builtin", 9.0}, {"native", 9.0}}
                   : std::map<std::string, double>{{"dnnl", 9.0}, {"openblas", 9.0}, {"f32", 9.0}});
    set_gemm_backend("auto");
    set_bf16_gemm_mode("auto");
    const std::set<std::string> measured = fake.timed();
    if (run == 0 && (available("dnnl") || available("openblas"))) {
      EXPECT_NE(gemm_backend(), "builtin") << "measured";
    }
    pin_gemm_choices();
    EXPECT_EQ(gemm_backend(), "builtin") << "run " << run;
    EXPECT_EQ(bf16_gemm_mode(), rule_bf16) << "run " << run;
    EXPECT_EQ(fake.timed(), measured) << "pinning timed something";
  }
  // A choice the program set stays pinned as it is (the ranks' agreement sets rank 0's).
  set_gemm_backend("builtin");
  set_bf16_gemm_mode("f32");
  pin_gemm_choices();
  EXPECT_EQ(gemm_backend(), "builtin");
  EXPECT_EQ(bf16_gemm_mode(), "f32");
}

TEST(GemmSelection, NoAvailableCandidateIsAClearError) {
  const std::vector<gemm_impl::Candidate> none{{"a", false}, {"b", false}};
  auto select_none = [&] {
    return gemm_impl::select_by_measurement(
        "test", none, 1, [](size_t) { return 1.0; }, 0.03);
  };
  EXPECT_THROW(select_none(), InvalidArgument);
  // Without fakes the rounds alternate, round 0 warming up: the best later round counts.
  std::vector<double> seconds;
  int calls = 0;
  const size_t winner = gemm_impl::select_by_measurement(
      "test", {{"slow", true}, {"off", false}, {"fast", true}}, 3,
      [&](size_t i) { return (++calls <= 2 ? 100.0 : 1.0) * (i == 0 ? 2.0 : 1.0); }, 0.03,
      &seconds);
  EXPECT_EQ(winner, 2u);
  EXPECT_EQ(calls, 8);  // (1 warm-up + 3 rounds) x 2 available
  EXPECT_EQ(seconds, (std::vector<double>{2.0, -1.0, 1.0}));
}

// A timing runs a class's products as a step does: a large class's one product (spread over the
// team by the call itself), a small class's one per team thread at once, each on its own operands
// (attention's heads) and its own thread.
TEST(GemmSelection, ClassesAreTimedAsAStepRunsThem) {
  const int before = num_threads();
  set_num_threads(2);
  for (int c = 0; c < 8; ++c) {
    SCOPED_TRACE(kClasses[c]);
    const bool large = std::string(kClasses[c]).ends_with(".large");
    EXPECT_EQ(gemm_impl::calls_at_once(c), large ? 1 : 2);
    std::mutex mu;
    std::map<int, std::thread::id> thread_of_call;
    std::atomic<int> inside{0}, most_inside{0};
    gemm_impl::run_as_in_a_step(c, [&](int call) {
      const int now = ++inside;
      int seen = most_inside.load();
      while (now > seen && !most_inside.compare_exchange_weak(seen, now)) {
      }
      // Long enough for a second thread to join in; the calls that overlap are counted.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      --inside;
      std::lock_guard lock(mu);
      EXPECT_TRUE(thread_of_call.emplace(call, std::this_thread::get_id()).second) << call;
    });
    ASSERT_EQ(thread_of_call.size(), large ? 1u : 2u);
    EXPECT_EQ(thread_of_call.begin()->first, 0);
    if (!large) {
      EXPECT_EQ(thread_of_call.rbegin()->first, 1);
      EXPECT_NE(thread_of_call[0], thread_of_call[1]) << "each call on a thread of its own";
      EXPECT_EQ(most_inside.load(), 2) << "the calls run at once";
    }
  }
  set_num_threads(1);
  EXPECT_EQ(gemm_impl::calls_at_once(0), 1);
  set_num_threads(before);
}

#ifdef __GLIBC__
// Before the timing, glibc's thresholds as a step's first large free leaves them: a library's
// scratch of a few MiB then comes from the heap, not from a mapping made and unmade per call.
TEST(GemmSelection, TheHeapIsSettledBeforeTiming) {
  gemm_impl::settle_the_heap();
  const size_t mapped_before = mallinfo2().hblks;
  void* volatile block = std::malloc(size_t{4} << 20);
  const size_t mapped_during = mallinfo2().hblks;
  std::free(block);
  EXPECT_EQ(mapped_during, mapped_before) << "a 4 MiB block was mapped on its own";
}
#endif

}  // namespace
}  // namespace chorus::tensor
