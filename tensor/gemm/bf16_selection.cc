// The autocast bf16 GEMM: which way each shape class runs, chosen by measurement.
//
// Three ways to compute c = round_bf16(op(a) op(b)) from bf16 operands with f32 accumulation:
//   native  our AVX512-BF16 kernel (gemm_blocked_bf16.cc), operands stored as bf16;
//   dnnl    oneDNN's bf16 matmul (gemm_dnnl_bf16.cc), operands stored as bf16;
//   f32     the f32 GEMM (gemm.cc's backend) on the operands widened to f32 (exact).
// Which is fastest depends on the CPU (vdpbf16ps at full or half the FMA rate, AMX or not) and
// on the shape, so the choice is made per shape class (gemm/shape_class.h: the transposition
// pattern times small or large, as the f32 backend's). On the first autocast GEMM every class is
// measured at a fixed shape of its own, the methods alternating round by round so a burst of
// load from other processes hits all of them alike; each keeps its best round. A method wins
// only when it beats the earlier ones in the order native, dnnl, f32 by more than kMargin (15%),
// so two methods within noise of each other give the same choice in every run.
//
// Operand storage follows the plan: bf16 when some class runs native or dnnl. The plan "every
// class f32 on f32-stored operands" (no widening) is timed too, and taken when its total is
// lower, so autocast never runs slower than the f32 GEMM it could always fall back on.
//
// The timing rounds, the rule and the cache are the f32 backend's too (gemm/selection.h).
// The decision is one string ("native", or "nn.small=native,nt.large=dnnl,..."):
// CHORUS_DEBUG=INFO logs it with the measured rates, bf16_gemm_mode() returns it, the parallel
// layer broadcasts rank 0's to every rank (parallel/common/kernel_agreement.cc), and
// CHORUS_TENSOR_BF16_GEMM or set_bf16_gemm_mode() forces one.
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/half.h"
#include "chorus/log.h"
#include "chorus/tensor/gemm.h"
#include "cpu/elementwise.h"
#include "gemm/backend.h"
#include "gemm/selection.h"
#include "gemm/shape_class.h"
#include "runtime/thread_pool.h"

namespace chorus::tensor {
namespace gemm_impl {
namespace {

const StringKnob kBf16Knob{
    "CHORUS_TENSOR_BF16_GEMM", "auto",
    "autocast bf16 GEMM: auto (fastest measured per shape class), native (AVX512-BF16 kernel), "
    "dnnl (oneDNN bf16 matmul), f32 (f32 GEMM on bf16-rounded operands), or per class, e.g. "
    "nt.large=dnnl,nn.large=native (classes left out are measured)"};

// A method must be this much faster than one earlier in the preference order to win. Wider than
// the f32 backends' 3%: the bf16 methods' rates at one shape move by 5-10% from launch to
// launch (page placement, the other process on the core), and each method rounds differently,
// so a flip changes results in the last bf16 bit, not only the speed.
constexpr double kMargin = 0.15;
constexpr const char* kMethodNames[] = {"native", "dnnl", "f32"};

struct Plan {
  std::array<Bf16Method, kShapeClasses> method{};
  bool bf16_operands = false;
};

bool method_available(Bf16Method m) {
  switch (m) {
    case Bf16Method::kNative:
      return blocked_bf16_available();
    case Bf16Method::kDnnl:
      return dnnl_bf16_available();
    case Bf16Method::kF32:
      return true;
  }
  return false;
}

std::string method_note(Bf16Method m) {
  switch (m) {
    case Bf16Method::kNative:
      return blocked_bf16_available() ? "" : "this CPU lacks AVX512-BF16";
    case Bf16Method::kDnnl:
      return dnnl_bf16_note();
    case Bf16Method::kF32:
      return "";
  }
  return "";
}

bool parse_method(const std::string& s, Bf16Method* m) {
  for (int i = 0; i < 3; ++i)
    if (s == kMethodNames[i]) {
      *m = static_cast<Bf16Method>(i);
      return true;
    }
  return false;
}

Plan finish(Plan p) {
  p.bf16_operands = false;
  for (Bf16Method m : p.method) p.bf16_operands |= m != Bf16Method::kF32;
  return p;
}

// Parses a mode string into `forced` (one entry per class; unset where left to measurement).
// "native" where the CPU lacks the kernel falls back to f32, as it always has; "dnnl" where
// oneDNN's matmul is missing is an error (it names the reason).
std::array<int, kShapeClasses> parse_mode(const std::string& mode, const char* what) {
  return parse_class_plan(mode, what, [&](const std::string& name) {
    Bf16Method m;
    CHORUS_ARG_CHECK(parse_method(name, &m), what, "=", mode, ": '", name,
                     "' is not auto, native, dnnl or f32");
    if (m == Bf16Method::kNative && !method_available(m)) return static_cast<int>(Bf16Method::kF32);
    CHORUS_ARG_CHECK(method_available(m), what, "=", mode, ": ", name,
                     " is unavailable: ", method_note(m));
    return static_cast<int>(m);
  });
}

// Seconds per call of each method (and of the f32 GEMM on f32-stored operands, index 3) for
// class c, a call being the class's products as a step runs them (run_as_in_a_step: one, or one
// per team thread at once): 9 alternating rounds after a warm-up (gemm/selection.h), the best
// round each (-1: not a candidate). A round repeats the call for ~2 ms.
std::array<double, 4> time_class(int c, const std::array<bool, 3>& candidates,
                                 bool warm_only = false) {
  // candidates[2] (f32) is always true: the fallback.
  const bool ta = class_ta(c), tb = class_tb(c);
  int64_t m, n, k;
  class_shape(c, &m, &n, &k);
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  struct Operands {
    std::vector<uint16_t> a16, b16;
    std::vector<float> a32, b32, wa, wb, out;
  };
  std::vector<Operands> sets(static_cast<size_t>(calls_at_once(c)));
  for (Operands& o : sets) {
    o.a16.resize(static_cast<size_t>(m * k));
    o.b16.resize(static_cast<size_t>(k * n));
    o.a32.resize(o.a16.size());
    o.wa.resize(o.a16.size());
    o.b32.resize(o.b16.size());
    o.wb.resize(o.b16.size());
    o.out.resize(static_cast<size_t>(m * n));
    for (size_t i = 0; i < o.a16.size(); ++i) {
      o.a16[i] = float_to_bf16(static_cast<float>(i % 13) * 0.1f - 0.6f);
      o.a32[i] = bf16_to_float(o.a16[i]);
    }
    for (size_t i = 0; i < o.b16.size(); ++i) {
      o.b16[i] = float_to_bf16(static_cast<float>(i % 7) * 0.1f - 0.3f);
      o.b32[i] = bf16_to_float(o.b16[i]);
    }
  }
  auto one = [&](int which, Operands& o) {
    switch (which) {
      case 0:
        blocked_gemm_bf16(ta, tb, m, n, k, 1.f, o.a16.data(), lda, o.b16.data(), ldb, false,
                          o.out.data(), n);
        break;
      case 1:
        dnnl_gemm_bf16(ta, tb, m, n, k, 1.f, o.a16.data(), lda, o.b16.data(), ldb, o.out.data(), n);
        break;
      case 2:  // as it runs on bf16-stored operands: widened first
        cpu::from_bf16(o.wa.data(), o.a16.data(), static_cast<int64_t>(o.a16.size()));
        cpu::from_bf16(o.wb.data(), o.b16.data(), static_cast<int64_t>(o.b16.size()));
        gemm(ta, tb, m, n, k, 1.f, o.wa.data(), lda, o.wb.data(), ldb, 0.f, o.out.data(), n);
        break;
      default:
        gemm(ta, tb, m, n, k, 1.f, o.a32.data(), lda, o.b32.data(), ldb, 0.f, o.out.data(), n);
    }
  };
  auto call = [&](int which) {
    run_as_in_a_step(c, [&](int s) { one(which, sets[static_cast<size_t>(s)]); });
  };
  const std::vector<Candidate> timed{{"native", candidates[0]},
                                     {"dnnl", candidates[1]},
                                     {"f32", candidates[2]},
                                     {"f32 on f32 operands", true}};
  if (warm_only) {  // warm_up_classes
    for (size_t w = 0; w < timed.size(); ++w)
      for (int i = 0; i < 2 && timed[w].available; ++i) call(static_cast<int>(w));
    return {};
  }
  const std::vector<double> t = time_candidates(
      "bf16 gemm " + class_name(c), timed, 9,
      repeated_round(timed.size(), 2e-3, [&](size_t w) { call(static_cast<int>(w)); }));
  return {t[0], t[1], t[2], t[3]};
}

std::string plan_string(const Plan& p) {
  std::vector<int> choice;
  for (Bf16Method m : p.method) choice.push_back(static_cast<int>(m));
  return class_plan_string(choice, [](int m) { return std::string(kMethodNames[m]); });
}

// Measures the classes `forced` leaves open (none: nothing is timed) and returns the whole plan.
Plan measure(const std::array<int, kShapeClasses>& forced) {
  std::array<bool, 3> candidates;
  for (int i = 0; i < 3; ++i) candidates[i] = method_available(static_cast<Bf16Method>(i));
  Plan mixed;
  double t_mixed = 0, t_all_f32 = 0;
  bool any_open = false;
  warm_up_classes(forced, [&](int c) { (void)time_class(c, candidates, true); });
  for (int c = 0; c < kShapeClasses; ++c) {
    if (forced[c] >= 0) {
      mixed.method[c] = static_cast<Bf16Method>(forced[c]);
      continue;
    }
    any_open = true;
    const std::array<double, 4> t = time_class(c, candidates);
    const int win = static_cast<int>(first_within_margin({t[0], t[1], t[2]}, kMargin));
    mixed.method[c] = static_cast<Bf16Method>(win);
    t_mixed += t[win];
    t_all_f32 += t[3];
    int64_t m, n, k;
    class_shape(c, &m, &n, &k);
    const int at_once = calls_at_once(c);
    const double gf = 2.0 * m * n * k * at_once * 1e-9;
    CHORUS_INFO(kLogTune, "tensor bf16 gemm ", class_name(c), " (", m, "x", n, "x", k,
                at_once > 1 ? detail::concat(", ", at_once, " at once") : std::string(),
                "): native ", candidates[0] ? gf / t[0] : 0.0, ", dnnl ",
                candidates[1] ? gf / t[1] : 0.0, ", f32 ", gf / t[2], " (", gf / t[3],
                " on f32 operands) GFLOP/s on ", pool_threads(), " threads -> ", kMethodNames[win]);
  }
  mixed = finish(mixed);
  // With nothing forced, f32 everywhere on f32-stored operands (no widening) when that is
  // faster in total than the mixed plan's bf16 storage.
  bool all_open = true;
  for (int f : forced) all_open &= f < 0;
  if (any_open && all_open && mixed.bf16_operands && t_all_f32 * (1 + kMargin) < t_mixed) {
    Plan f32;
    f32.method.fill(Bf16Method::kF32);
    CHORUS_INFO(kLogTune, "tensor bf16 gemm: f32 everywhere (", t_all_f32 * 1e3, " ms) beats ",
                plan_string(mixed), " (", t_mixed * 1e3, " ms)");
    return finish(f32);
  }
  return mixed;
}

// The plan as the cache holds it: one method per class.
ChoiceCache::Decision decision_of(const Plan& p, ChoiceOrigin origin) {
  ChoiceCache::Decision d{{}, origin};
  for (Bf16Method m : p.method) d.choice.push_back(static_cast<int>(m));
  return d;
}

ChoiceCache::Decision logged(const Plan& p, ChoiceOrigin origin) {
  CHORUS_INFO(kLogTune, "tensor bf16 gemm: using ", plan_string(p), " (",
              origin_name(origin, kBf16Knob.name()), ")");
  return decision_of(p, origin);
}

// On first use: the knob's classes as it says, the rest measured.
ChoiceCache& cache() {
  static ChoiceCache c(kShapeClasses, [] {
    const std::string mode = kBf16Knob.get();
    return logged(measure(parse_mode(mode, kBf16Knob.name())),
                  mode == "auto" ? ChoiceOrigin::kMeasured : ChoiceOrigin::kForced);
  });
  return c;
}

Plan plan() {
  const ChoiceCache::Decision d = cache().decision();
  Plan p;
  for (int c = 0; c < kShapeClasses; ++c) p.method[c] = static_cast<Bf16Method>(d.choice[c]);
  return finish(p);
}

}  // namespace

Bf16Method bf16_method(int c) { return static_cast<Bf16Method>(cache().choice(c)); }

bool bf16_operands_as_bf16() {
  for (int c = 0; c < kShapeClasses; ++c)
    if (static_cast<Bf16Method>(cache().choice(c)) != Bf16Method::kF32) return true;
  return false;
}

void pin_bf16_gemm_choice() {
  // A plan the program set stays; a measured one (or none yet) gives way to the rule: the knob's
  // forced classes, every other class native (f32 where the kernel is missing).
  cache().replace_unless(
      [](const ChoiceCache::Decision& d) { return d.origin == ChoiceOrigin::kSet; },
      [] {
        auto forced = parse_mode(kBf16Knob.get(), kBf16Knob.name());
        const Bf16Method fallback =
            blocked_bf16_available() ? Bf16Method::kNative : Bf16Method::kF32;
        Plan p;
        for (int c = 0; c < kShapeClasses; ++c)
          p.method[c] = forced[c] >= 0 ? static_cast<Bf16Method>(forced[c]) : fallback;
        return logged(finish(p), ChoiceOrigin::kPinned);
      });
}

}  // namespace gemm_impl

std::string bf16_gemm_mode() { return gemm_impl::plan_string(gemm_impl::plan()); }

void set_bf16_gemm_mode(const std::string& mode) {
  using namespace gemm_impl;
  const auto forced = parse_mode(mode, "set_bf16_gemm_mode");
  // Times only the classes the string leaves out; "auto" is a measured choice (pinning replaces
  // it), anything else a set one.
  cache().store(
      logged(measure(forced), mode == "auto" ? ChoiceOrigin::kMeasured : ChoiceOrigin::kSet));
}

}  // namespace chorus::tensor
