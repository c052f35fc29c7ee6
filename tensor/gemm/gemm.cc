// GEMM entry points: backend selection by measurement, thread count, 16-bit inputs.
#include "chorus/tensor/gemm.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/log.h"
#include "core/thread_pool.h"
#include "gemm/backend.h"
#include "kernels/simd.h"

namespace chorus::tensor {
namespace {

const StringKnob kGemmKnob{"CHORUS_TENSOR_GEMM", "auto",
                           "f32 GEMM backend: auto (fastest measured), dnnl, openblas, builtin"};

const StringKnob kBf16Knob{"CHORUS_TENSOR_BF16_GEMM", "auto",
                           "autocast bf16 GEMM: auto (faster measured), native (AVX512-BF16 "
                           "kernel), f32 (f32 GEMM on bf16-rounded operands)"};

// The selection shape: one GPT-2-small-ish linear layer on a (B*T = 512) batch slice.
constexpr int64_t kSelM = 512, kSelN = 768, kSelK = 256;

// The autocast bf16 GEMM: -1 not chosen yet, 0 f32 GEMM on rounded operands, 1 the native kernel.
std::atomic<int> g_bf16_native{-1};

struct Registry {
  std::vector<std::unique_ptr<gemm_impl::SgemmBackend>> backends;
  std::vector<double> gflops;  // 0 until measured
  std::atomic<gemm_impl::SgemmBackend*> chosen{nullptr};
};

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

// GFLOP/s of every available backend. Rounds alternate between the backends and each keeps its
// best round, so a burst of load from other processes hits all of them alike instead of
// deciding the choice (the machine this runs on is often shared).
std::vector<double> measure_backends(std::vector<gemm_impl::SgemmBackend*> backends) {
  std::vector<float> a(kSelM * kSelK), b(kSelK * kSelN), c(kSelM * kSelN);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 13) * 0.1f - 0.6f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 7) * 0.1f - 0.3f;
  std::vector<double> best(backends.size(), 1e30);
  for (int rep = 0; rep < 6; ++rep)
    for (size_t i = 0; i < backends.size(); ++i) {
      const double s = time_round(*backends[i], a, b, c);
      if (rep > 0) best[i] = std::min(best[i], s);  // round 0 warms up (JIT, page faults)
    }
  std::vector<double> gflops;
  for (double s : best) gflops.push_back(3.0 * 2.0 * kSelM * kSelN * kSelK / s * 1e-9);
  return gflops;
}

// Measures every available backend and picks the fastest.
void select_by_measurement(Registry& r) {
  std::vector<gemm_impl::SgemmBackend*> available;
  std::vector<size_t> index;
  for (size_t i = 0; i < r.backends.size(); ++i)
    if (r.backends[i]->available()) {
      available.push_back(r.backends[i].get());
      index.push_back(i);
    }
  const std::vector<double> rates = measure_backends(available);
  double best = -1;
  gemm_impl::SgemmBackend* winner = nullptr;
  for (size_t j = 0; j < available.size(); ++j) {
    r.gflops[index[j]] = rates[j];
    CHORUS_INFO(kLogTune, "tensor gemm: ", available[j]->name(), " (", available[j]->note(),
                ") ", rates[j], " GFLOP/s on ", pool_threads(), " threads");
    if (rates[j] > best) {
      best = rates[j];
      winner = available[j];
    }
  }
  r.chosen.store(winner, std::memory_order_release);
  CHORUS_INFO(kLogTune, "tensor gemm: using ", winner->name());
}

Registry& registry() {
  static Registry r;
  static const bool filled = [] {
    r.backends.push_back(gemm_impl::make_dnnl_backend());
    r.backends.push_back(gemm_impl::make_openblas_backend());
    r.backends.push_back(gemm_impl::make_builtin_backend());
    r.gflops.assign(r.backends.size(), 0.0);
    const std::string forced = kGemmKnob.get();
    if (forced != "auto") {
      for (auto& be : r.backends)
        if (be->name() == forced) {
          CHORUS_ARG_CHECK(be->available(), kGemmKnob.name(), "=", forced,
                           " is unavailable: ", be->note());
          r.chosen.store(be.get());
        }
      CHORUS_ARG_CHECK(r.chosen.load() != nullptr, kGemmKnob.name(), "=", forced,
                       ": expected auto, dnnl, openblas or builtin");
    }
    return true;
  }();
  (void)filled;
  return r;
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

// The backend in use: measured on first use unless forced or set.
gemm_impl::SgemmBackend& chosen() {
  Registry& r = registry();
  if (gemm_impl::SgemmBackend* c = r.chosen.load(std::memory_order_acquire)) return *c;
  std::lock_guard lock(registry_mutex());
  if (r.chosen.load() == nullptr) select_by_measurement(r);
  return *r.chosen.load();
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
  // Stored shapes: A is (ta ? K x M : M x K), B is (tb ? N x K : K x N).
  auto af = widen(a, ta ? k : m, ta ? m : k, lda);
  auto bf = widen(b, tb ? n : k, tb ? k : n, ldb);
  run_sgemm(chosen(), ta, tb, m, n, k, alpha, af.get(), ta ? m : k, bf.get(), tb ? k : n, beta,
            c, ldc);
}

}  // namespace

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  run_sgemm(chosen(), ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
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

namespace gemm_impl {

namespace {

// The forward shape of the selection (x W^T), both ways, alternating, best of 5.
bool measure_bf16_native() {
  std::vector<uint16_t> a16(kSelM * kSelK, 0x3f80), b16(kSelN * kSelK, 0x3f00);
  std::vector<float> a(kSelM * kSelK, 1.f), b(kSelN * kSelK, 0.5f), c(kSelM * kSelN);
  double t_native = 1e30, t_f32 = 1e30;
  for (int rep = 0; rep < 6; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    blocked_gemm_bf16(false, true, kSelM, kSelN, kSelK, 1.f, a16.data(), kSelK, b16.data(),
                      kSelK, false, c.data(), kSelN);
    auto t1 = std::chrono::steady_clock::now();
    run_sgemm(chosen(), false, true, kSelM, kSelN, kSelK, 1.f, a.data(), kSelK, b.data(), kSelK,
              0.f, c.data(), kSelN);
    auto t2 = std::chrono::steady_clock::now();
    if (rep == 0) continue;
    t_native = std::min(t_native, std::chrono::duration<double>(t1 - t0).count());
    t_f32 = std::min(t_f32, std::chrono::duration<double>(t2 - t1).count());
  }
  const double flops = 2.0 * kSelM * kSelN * kSelK * 1e-9;
  CHORUS_INFO(kLogTune, "tensor gemm: bf16 native ", flops / t_native, " GFLOP/s, f32 (",
              chosen().name(), ") ", flops / t_f32, " GFLOP/s on ", pool_threads(), " threads");
  return t_native < t_f32;
}

}  // namespace

bool native_bf16_gemm() {
  const int known = g_bf16_native.load(std::memory_order_acquire);
  if (known >= 0) return known == 1;
  (void)chosen();  // the f32 backend first: its selection takes the same lock
  std::lock_guard lock(registry_mutex());
  if (g_bf16_native.load() < 0) {
    bool native = false;
    if (blocked_bf16_available()) {
      const std::string forced = kBf16Knob.get();
      CHORUS_ARG_CHECK(forced == "auto" || forced == "native" || forced == "f32",
                       kBf16Knob.name(), "=", forced, ": expected auto, native or f32");
      native = forced == "native" || (forced == "auto" && measure_bf16_native());
    }
    g_bf16_native.store(native ? 1 : 0, std::memory_order_release);
  }
  return g_bf16_native.load() == 1;
}

}  // namespace gemm_impl

std::string gemm_backend() { return chosen().name(); }

std::vector<GemmBackendInfo> gemm_backends() {
  Registry& r = registry();
  std::vector<GemmBackendInfo> out;
  for (size_t i = 0; i < r.backends.size(); ++i)
    out.push_back({r.backends[i]->name(), r.backends[i]->available(), r.gflops[i],
                   r.backends[i]->note()});
  return out;
}

void set_gemm_backend(const std::string& name) {
  std::lock_guard lock(registry_mutex());
  Registry& r = registry();
  for (auto& be : r.backends)
    if (be->name() == name) {
      CHORUS_ARG_CHECK(be->available(), "gemm backend ", name, " unavailable: ", be->note());
      r.chosen.store(be.get(), std::memory_order_release);
      return;
    }
  throw InvalidArgument("unknown gemm backend '" + name + "'");
}

void pin_gemm_choices() {
  {
    std::lock_guard lock(registry_mutex());
    Registry& r = registry();  // applies a forced CHORUS_TENSOR_GEMM
    if (r.chosen.load() == nullptr)
      for (auto& be : r.backends)
        if (std::string(be->name()) == "builtin") r.chosen.store(be.get(), std::memory_order_release);
  }
  const std::string forced = kBf16Knob.get();
  if (g_bf16_native.load() < 0) set_bf16_gemm_mode(forced == "f32" ? "f32" : "native");
}

std::string bf16_gemm_mode() { return gemm_impl::native_bf16_gemm() ? "native" : "f32"; }

void set_bf16_gemm_mode(const std::string& mode) {
  CHORUS_ARG_CHECK(mode == "native" || mode == "f32", "bf16 gemm mode '", mode,
                   "': expected native or f32");
  // Where the native kernel is missing, "native" falls back to f32 as the knob does.
  const bool native = mode == "native" && gemm_impl::blocked_bf16_available();
  std::lock_guard lock(registry_mutex());
  g_bf16_native.store(native ? 1 : 0, std::memory_order_release);
}

int num_threads() { return pool_threads(); }

void set_num_threads(int n) { set_pool_threads(n); }

}  // namespace chorus::tensor
