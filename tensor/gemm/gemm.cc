// GEMM entry points: the f32 backend per shape class chosen by measurement, thread count,
// 16-bit inputs.
#include "chorus/tensor/gemm.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/log.h"
#include "cpu/simd.h"
#include "gemm/backend.h"
#include "gemm/selection.h"
#include "gemm/shape_class.h"
#include "runtime/thread_pool.h"

namespace chorus::tensor {
namespace {

const StringKnob kGemmKnob{
    "CHORUS_TENSOR_GEMM", "auto",
    "f32 GEMM backend: auto (fastest measured per shape class), dnnl, openblas, builtin, or per "
    "class, e.g. nt.large=dnnl,tn.large=openblas (classes left out are measured)"};

// Runs an sgemm on `be` over the team: the backend's own split, or one call per row block.
void run_sgemm(gemm_impl::SgemmBackend& be, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
               float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
               float* c, int64_t ldc) {
  if (be.splits_rows_itself()) {
    be.sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Row blocks of at least 16 rows; op(A)'s rows start at a + i0 * lda (A) or a + i0 (A^T).
  parallel_for((m + 15) / 16, 32 * n * k, [&](int64_t s, int64_t e, int) {
    const int64_t i0 = s * 16, i1 = std::min(m, e * 16);
    be.sgemm(ta, tb, i1 - i0, n, k, alpha, ta ? a + i0 : a + i0 * lda, lda, b, ldb, beta,
             c + i0 * ldc, ldc);
  });
}

using gemm_impl::ChoiceCache;
using gemm_impl::ChoiceOrigin;
using gemm_impl::kShapeClasses;

// The f32 backends, in preference order (the selection keeps the first within 3% of the
// fastest), and the choice: one backend per shape class (gemm/shape_class.h), every class
// measured at once on first use (gemm/selection.h).
struct Registry {
  std::vector<std::unique_ptr<gemm_impl::SgemmBackend>> backends;
  std::vector<double> gflops;  // 0 until measured
  ChoiceCache choice{kShapeClasses, [this] { return decide(); }};

  Registry() {
    backends.push_back(gemm_impl::make_builtin_backend());
    backends.push_back(gemm_impl::make_dnnl_backend());
    backends.push_back(gemm_impl::make_openblas_backend());
    gflops.assign(backends.size(), 0.0);
  }
  int index_of(const std::string& name) const {
    for (size_t i = 0; i < backends.size(); ++i)
      if (name == backends[i]->name()) return static_cast<int>(i);
    return -1;
  }
  // A plan string ("auto", a backend, or "class=backend,...") as one backend per class, -1
  // where left to measurement; `what` names the knob or setter in errors.
  std::array<int, kShapeClasses> parse(const std::string& plan, const char* what) const {
    return gemm_impl::parse_class_plan(plan, what, [&](const std::string& name) {
      const int i = index_of(name);
      CHORUS_ARG_CHECK(i >= 0, what, "=", plan, ": '", name,
                       "' is not auto, dnnl, openblas or builtin");
      CHORUS_ARG_CHECK(backends[static_cast<size_t>(i)]->available(), what, "=", plan, ": ", name,
                       " is unavailable: ", backends[static_cast<size_t>(i)]->note());
      return i;
    });
  }
  std::string plan_string(const std::vector<int>& choice) const {
    return gemm_impl::class_plan_string(
        choice, [this](int i) { return std::string(backends[static_cast<size_t>(i)]->name()); });
  }
  ChoiceCache::Decision logged(ChoiceCache::Decision d) const {
    CHORUS_INFO(kLogTune, "tensor gemm: using ", plan_string(d.choice), " (",
                gemm_impl::origin_name(d.origin, kGemmKnob.name()), ")");
    return d;
  }
  // On first use: the knob's classes as it says, the rest measured.
  ChoiceCache::Decision decide() {
    const std::string plan = kGemmKnob.get();
    return logged({measure(parse(plan, kGemmKnob.name())),
                   plan == "auto" ? ChoiceOrigin::kMeasured : ChoiceOrigin::kForced});
  }
  // Seconds per call of each available backend (-1 for the others) on class c's shape, a call
  // being the class's products as a step runs them (gemm_impl::run_as_in_a_step: one over the
  // team, or one per team thread at once): 5 alternating rounds after a warm-up
  // (gemm/selection.h), the best round each. A round repeats the call for ~0.5 ms, so a small
  // class's tens of microseconds are not lost in the clock's noise; a large class's call takes
  // longer alone (all eight classes: ~0.2 s on one Zen 3 core, paid once per process).
  // `warm_only`: no timing, two calls of every available backend (gemm_impl::warm_up_classes).
  std::vector<double> time_class(int c, bool warm_only = false) {
    const bool ta = gemm_impl::class_ta(c), tb = gemm_impl::class_tb(c);
    int64_t m, n, k;
    gemm_impl::f32_class_shape(c, &m, &n, &k);
    const int64_t lda = ta ? m : k, ldb = tb ? k : n;
    struct Operands {
      std::vector<float> a, b, out;
    };
    std::vector<Operands> sets(static_cast<size_t>(gemm_impl::calls_at_once(c)));
    for (Operands& o : sets) {
      o.a.resize(static_cast<size_t>(m * k));
      o.b.resize(static_cast<size_t>(k * n));
      o.out.resize(static_cast<size_t>(m * n));
      for (size_t i = 0; i < o.a.size(); ++i) o.a[i] = static_cast<float>(i % 13) * 0.1f - 0.6f;
      for (size_t i = 0; i < o.b.size(); ++i) o.b[i] = static_cast<float>(i % 7) * 0.1f - 0.3f;
    }
    const auto run = [&](size_t w) {
      gemm_impl::run_as_in_a_step(c, [&](int s) {
        Operands& o = sets[static_cast<size_t>(s)];
        run_sgemm(*backends[w], ta, tb, m, n, k, 1.f, o.a.data(), lda, o.b.data(), ldb, 0.f,
                  o.out.data(), n);
      });
    };
    if (warm_only) {
      for (size_t w = 0; w < backends.size(); ++w)
        for (int i = 0; i < 2 && backends[w]->available(); ++i) run(w);
      return {};
    }
    std::vector<gemm_impl::Candidate> candidates;
    for (const auto& be : backends) candidates.push_back({be->name(), be->available()});
    return gemm_impl::time_candidates("f32 gemm " + gemm_impl::class_name(c), candidates, 5,
                                      gemm_impl::repeated_round(backends.size(), 5e-4, run));
  }
  // Measures the classes `fixed` leaves open (none: nothing is timed); GFLOP/s of each backend
  // over the measured classes together kept for gemm_backends().
  std::vector<int> measure(const std::array<int, kShapeClasses>& fixed) {
    std::vector<int> plan(kShapeClasses);
    std::vector<double> flops(backends.size(), 0.0), seconds(backends.size(), 0.0);
    bool any_open = false;
    gemm_impl::warm_up_classes(fixed, [this](int c) { (void)time_class(c, true); });
    for (int c = 0; c < kShapeClasses; ++c) {
      if (fixed[static_cast<size_t>(c)] >= 0) {
        plan[static_cast<size_t>(c)] = fixed[static_cast<size_t>(c)];
        continue;
      }
      any_open = true;
      const std::vector<double> t = time_class(c);
      const size_t win = gemm_impl::first_within_margin(t, 0.03);
      CHORUS_ARG_CHECK(win < t.size(), "f32 gemm: no backend is available");
      plan[static_cast<size_t>(c)] = static_cast<int>(win);
      int64_t m, n, k;
      gemm_impl::f32_class_shape(c, &m, &n, &k);
      const int at_once = gemm_impl::calls_at_once(c);
      const double f = 2.0 * static_cast<double>(m * n * k) * at_once;
      std::string rates;
      for (size_t i = 0; i < backends.size(); ++i) {
        if (t[i] < 0) continue;
        flops[i] += f;
        seconds[i] += t[i];
        char rate[64];
        std::snprintf(rate, sizeof rate, "%s%s %.1f", rates.empty() ? "" : ", ",
                      backends[i]->name(), f / t[i] * 1e-9);
        rates += rate;
      }
      CHORUS_INFO(kLogTune, "tensor gemm ", gemm_impl::class_name(c), " (", m, "x", n, "x", k,
                  at_once > 1 ? detail::concat(", ", at_once, " at once") : std::string(),
                  "): ", rates, " GFLOP/s on ", pool_threads(), " threads -> ",
                  backends[win]->name());
    }
    if (any_open)
      for (size_t i = 0; i < backends.size(); ++i)
        if (seconds[i] > 0) gflops[i] = flops[i] / seconds[i] * 1e-9;
    return plan;
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

// The backend of a product's shape class: measured on first use unless forced or set.
gemm_impl::SgemmBackend& chosen(bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  Registry& r = registry();
  return *r.backends[static_cast<size_t>(r.choice.choice(gemm_impl::shape_class(ta, tb, m, n, k)))];
}

// A product over an empty inner dimension is a sum of nothing: c = beta c (0 when beta is 0,
// whatever c held). The libraries refuse lda = 0, so no call reaches them.
template <class T>
bool empty_product(int64_t m, int64_t n, int64_t k, T beta, T* c, int64_t ldc) {
  if (k != 0 && m != 0 && n != 0) return false;
  if (k == 0)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
  return true;
}

// Widens a 16-bit matrix (rows x cols, leading dim ld) into a dense f32 one.
template <class H>
std::unique_ptr<float[]> widen(const H* src, int64_t rows, int64_t cols, int64_t ld) {
  std::unique_ptr<float[]> out(new float[static_cast<size_t>(rows * cols)]);
  parallel_for(rows, cols, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = static_cast<float>(src[r * ld + c]);
  });
  return out;
}

template <class H>
void gemm_16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const H* a,
             int64_t lda, const H* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (empty_product(m, n, k, beta, c, ldc)) return;
  // Stored shapes: A is (ta ? K x M : M x K), B is (tb ? N x K : K x N).
  auto af = widen(a, ta ? k : m, ta ? m : k, lda);
  auto bf = widen(b, tb ? n : k, tb ? k : n, ldb);
  run_sgemm(chosen(ta, tb, m, n, k), ta, tb, m, n, k, alpha, af.get(), ta ? m : k, bf.get(),
            tb ? k : n, beta, c, ldc);
}

}  // namespace

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (empty_product(m, n, k, beta, c, ldc)) return;
  run_sgemm(chosen(ta, tb, m, n, k), ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (empty_product(m, n, k, beta, c, ldc)) return;
  gemm_impl::builtin_dgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
          int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const Half* a,
          int64_t lda, const Half* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

std::string gemm_backend() {
  Registry& r = registry();
  return r.plan_string(r.choice.decision().choice);
}

std::vector<GemmBackendInfo> gemm_backends() {
  Registry& r = registry();
  std::vector<GemmBackendInfo> out;
  for (size_t i = 0; i < r.backends.size(); ++i)
    out.push_back(
        {r.backends[i]->name(), r.backends[i]->available(), r.gflops[i], r.backends[i]->note()});
  return out;
}

void set_gemm_backend(const std::string& plan) {
  Registry& r = registry();
  // Times only the classes the string leaves out; "auto" is a measured choice (pinning replaces
  // it), anything else a set one.
  const auto fixed = r.parse(plan, "set_gemm_backend");
  r.choice.store(
      r.logged({r.measure(fixed), plan == "auto" ? ChoiceOrigin::kMeasured : ChoiceOrigin::kSet}));
}

void pin_gemm_choices() {
  Registry& r = registry();
  // A set or pinned plan stays; a measured one (or none yet) gives way to the rule: the knob's
  // classes as it says, builtin elsewhere.
  r.choice.replace_unless(
      [](const ChoiceCache::Decision& d) {
        return d.origin == ChoiceOrigin::kSet || d.origin == ChoiceOrigin::kPinned;
      },
      [&r] {
        const auto fixed = r.parse(kGemmKnob.get(), kGemmKnob.name());
        ChoiceCache::Decision d{{}, ChoiceOrigin::kForced};
        for (int f : fixed) {
          if (f < 0) d.origin = ChoiceOrigin::kPinned;
          d.choice.push_back(f >= 0 ? f : r.index_of("builtin"));
        }
        return r.logged(d);
      });
  gemm_impl::pin_bf16_gemm_choice();
}

int num_threads() { return pool_threads(); }

void set_num_threads(int n) { set_pool_threads(n); }

}  // namespace chorus::tensor
