// GEMM entry points: backend selection by measurement, thread count, 16-bit inputs.
#include "chorus/tensor/gemm.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/log.h"
#include "cpu/simd.h"
#include "gemm/backend.h"
#include "gemm/selection.h"
#include "runtime/thread_pool.h"

namespace chorus::tensor {
namespace {

const StringKnob kGemmKnob{"CHORUS_TENSOR_GEMM", "auto",
                           "f32 GEMM backend: auto (fastest measured), dnnl, openblas, builtin"};

// The selection shape: one GPT-2-small-ish linear layer on a (B*T = 512) batch slice.
constexpr int64_t kSelM = 512, kSelN = 768, kSelK = 256;

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

// Seconds for one round of the shapes a training step uses: plain, B transposed (forward of
// linear) and A transposed (weight gradient).
double time_round(gemm_impl::SgemmBackend& be, std::vector<float>& a, std::vector<float>& b,
                  std::vector<float>& c) {
  const auto t0 = std::chrono::steady_clock::now();
  run_sgemm(be, false, true, kSelM, kSelN, kSelK, 1.f, a.data(), kSelK, b.data(), kSelK, 0.f,
            c.data(), kSelN);
  run_sgemm(be, false, false, kSelM, kSelK, kSelN, 1.f, c.data(), kSelN, b.data(), kSelK, 0.f,
            a.data(), kSelK);
  run_sgemm(be, true, false, kSelN, kSelK, kSelM, 1.f, c.data(), kSelN, a.data(), kSelK, 0.f,
            b.data(), kSelK);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

using gemm_impl::ChoiceCache;
using gemm_impl::ChoiceOrigin;

// The f32 backends, in preference order (the selection keeps the first within 3% of the
// fastest), and the choice: one shape class, every f32 GEMM (gemm/selection.h).
struct Registry {
  std::vector<std::unique_ptr<gemm_impl::SgemmBackend>> backends;
  std::vector<double> gflops;  // 0 until measured
  ChoiceCache choice{1, [this] { return decide(); }};

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
  // CHORUS_TENSOR_GEMM's backend, or -1 for auto.
  int forced() const {
    const std::string name = kGemmKnob.get();
    if (name == "auto") return -1;
    const int i = index_of(name);
    CHORUS_ARG_CHECK(i >= 0, kGemmKnob.name(), "=", name,
                     ": expected auto, dnnl, openblas or builtin");
    CHORUS_ARG_CHECK(backends[static_cast<size_t>(i)]->available(), kGemmKnob.name(), "=", name,
                     " is unavailable: ", backends[static_cast<size_t>(i)]->note());
    return i;
  }
  // On first use: the knob's backend, else the fastest measured.
  ChoiceCache::Decision decide() {
    const int f = forced();
    if (f < 0) return measure();
    CHORUS_INFO(kLogTune, "tensor gemm: using ", backends[static_cast<size_t>(f)]->name(), " (",
                kGemmKnob.name(), ")");
    return {{f}, ChoiceOrigin::kForced};
  }
  // Every available backend multiplies the same matrices (gemm/selection.h's rounds); GFLOP/s
  // of each kept for gemm_backends().
  ChoiceCache::Decision measure() {
    std::vector<gemm_impl::Candidate> candidates;
    for (const auto& be : backends) candidates.push_back({be->name(), be->available()});
    std::vector<float> a(kSelM * kSelK), b(kSelK * kSelN), c(kSelM * kSelN);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 13) * 0.1f - 0.6f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 7) * 0.1f - 0.3f;
    std::vector<double> seconds;
    const size_t winner = gemm_impl::select_by_measurement(
        "f32 gemm", candidates, 5, [&](size_t i) { return time_round(*backends[i], a, b, c); },
        0.03, &seconds);
    for (size_t i = 0; i < backends.size(); ++i) {
      if (seconds[i] < 0) continue;
      gflops[i] = 3.0 * 2.0 * kSelM * kSelN * kSelK / seconds[i] * 1e-9;
      CHORUS_INFO(kLogTune, "tensor gemm: ", backends[i]->name(), " (", backends[i]->note(), ") ",
                  gflops[i], " GFLOP/s on ", pool_threads(), " threads");
    }
    CHORUS_INFO(kLogTune, "tensor gemm: using ", backends[winner]->name(), " (measured)");
    return {{static_cast<int>(winner)}, ChoiceOrigin::kMeasured};
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

// The backend in use: measured on first use unless forced or set.
gemm_impl::SgemmBackend& chosen() {
  Registry& r = registry();
  return *r.backends[static_cast<size_t>(r.choice.choice(0))];
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
  run_sgemm(chosen(), ta, tb, m, n, k, alpha, af.get(), ta ? m : k, bf.get(), tb ? k : n, beta, c,
            ldc);
}

}  // namespace

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (empty_product(m, n, k, beta, c, ldc)) return;
  run_sgemm(chosen(), ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
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

std::string gemm_backend() { return chosen().name(); }

std::vector<GemmBackendInfo> gemm_backends() {
  Registry& r = registry();
  std::vector<GemmBackendInfo> out;
  for (size_t i = 0; i < r.backends.size(); ++i)
    out.push_back(
        {r.backends[i]->name(), r.backends[i]->available(), r.gflops[i], r.backends[i]->note()});
  return out;
}

void set_gemm_backend(const std::string& name) {
  Registry& r = registry();
  if (name == "auto") {
    r.choice.store(r.measure());
    return;
  }
  const int i = r.index_of(name);
  if (i < 0) throw InvalidArgument("unknown gemm backend '" + name + "'");
  gemm_impl::SgemmBackend& be = *r.backends[static_cast<size_t>(i)];
  CHORUS_ARG_CHECK(be.available(), "gemm backend ", name, " unavailable: ", be.note());
  r.choice.store({{i}, ChoiceOrigin::kSet});
}

void pin_gemm_choices() {
  Registry& r = registry();
  // A forced or set backend stays; a measured one (or none yet) gives way to the rule.
  r.choice.replace_unless(
      [](const ChoiceCache::Decision& d) {
        return d.origin == ChoiceOrigin::kForced || d.origin == ChoiceOrigin::kSet ||
               d.origin == ChoiceOrigin::kPinned;
      },
      [&r] {
        const int f = r.forced();
        if (f >= 0) return ChoiceCache::Decision{{f}, ChoiceOrigin::kForced};
        CHORUS_INFO(kLogTune, "tensor gemm: builtin (pinned)");
        return ChoiceCache::Decision{{r.index_of("builtin")}, ChoiceOrigin::kPinned};
      });
  gemm_impl::pin_bf16_gemm_choice();
}

int num_threads() { return pool_threads(); }

void set_num_threads(int n) { set_pool_threads(n); }

}  // namespace chorus::tensor
