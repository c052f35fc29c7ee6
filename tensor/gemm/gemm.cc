// GEMM entry points: backend selection by measurement, thread count, 16-bit inputs.
#include "chorus/tensor/gemm.h"

#include <omp.h>
#include <sched.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/log.h"
#include "gemm/backend.h"

namespace chorus::tensor {
namespace {

const StringKnob kGemmKnob{"CHORUS_TENSOR_GEMM", "auto",
                           "f32 GEMM backend: auto (fastest measured), dnnl, openblas, builtin"};
const IntKnob kThreadsKnob{"CHORUS_TENSOR_THREADS", 0,
                           "threads for tensor kernels and GEMM (0 = all cores of the affinity mask)"};

// The selection shape: one GPT-2-small-ish linear layer on a (B*T = 512) batch slice.
constexpr int64_t kSelM = 512, kSelN = 768, kSelK = 256;

struct Registry {
  std::vector<std::unique_ptr<gemm_impl::SgemmBackend>> backends;
  std::vector<double> gflops;
  gemm_impl::SgemmBackend* chosen = nullptr;
  int threads = 1;
};

double time_backend(gemm_impl::SgemmBackend& be) {
  std::vector<float> a(kSelM * kSelK), b(kSelK * kSelN), c(kSelM * kSelN);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 13) * 0.1f - 0.6f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 7) * 0.1f - 0.3f;
  // Warm up (JIT, thread pools), then keep the best of a few runs over the shapes a training
  // step uses: plain, B transposed (forward of linear) and A transposed (weight gradient).
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    be.sgemm(false, true, kSelM, kSelN, kSelK, 1.f, a.data(), kSelK, b.data(), kSelK, 0.f,
             c.data(), kSelN);
    be.sgemm(false, false, kSelM, kSelK, kSelN, 1.f, c.data(), kSelN, b.data(), kSelK, 0.f,
             a.data(), kSelK);
    be.sgemm(true, false, kSelN, kSelK, kSelM, 1.f, c.data(), kSelN, a.data(), kSelK, 0.f,
             b.data(), kSelK);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0 && s < best) best = s;
  }
  return 3.0 * 2.0 * kSelM * kSelN * kSelK / best * 1e-9;
}

int default_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, omp_get_num_procs());
}

Registry& registry() {
  static Registry reg = [] {
    Registry r;
    const int64_t want = kThreadsKnob.get();
    r.threads = want > 0 ? static_cast<int>(want) : default_threads();
    omp_set_num_threads(r.threads);
    r.backends.push_back(gemm_impl::make_dnnl_backend());
    r.backends.push_back(gemm_impl::make_openblas_backend());
    r.backends.push_back(gemm_impl::make_builtin_backend());
    r.gflops.assign(r.backends.size(), 0.0);
    for (auto& be : r.backends) be->set_threads(r.threads);
    const std::string forced = kGemmKnob.get();
    if (forced != "auto") {
      for (auto& be : r.backends)
        if (be->name() == forced) {
          CHORUS_ARG_CHECK(be->available(), kGemmKnob.name(), "=", forced,
                           " is unavailable: ", be->note());
          r.chosen = be.get();
        }
      CHORUS_ARG_CHECK(r.chosen != nullptr, kGemmKnob.name(), "=", forced,
                       ": expected auto, dnnl, openblas or builtin");
      return r;
    }
    double best = -1;
    for (size_t i = 0; i < r.backends.size(); ++i) {
      auto& be = r.backends[i];
      if (!be->available()) continue;
      r.gflops[i] = time_backend(*be);
      CHORUS_INFO(kLogTune, "tensor gemm: ", be->name(), " (", be->note(), ") ", r.gflops[i],
                  " GFLOP/s on ", r.threads, " threads");
      if (r.gflops[i] > best) {
        best = r.gflops[i];
        r.chosen = be.get();
      }
    }
    CHORUS_INFO(kLogTune, "tensor gemm: using ", r.chosen->name());
    return r;
  }();
  return reg;
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

gemm_impl::SgemmBackend& chosen() { return *registry().chosen; }

// Widens a 16-bit matrix (rows x cols, leading dim ld) into a dense f32 one.
template <class H>
std::unique_ptr<float[]> widen(const H* src, int64_t rows, int64_t cols, int64_t ld) {
  std::unique_ptr<float[]> out(new float[static_cast<size_t>(rows * cols)]);
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = static_cast<float>(src[r * ld + c]);
  return out;
}

template <class H>
void gemm_16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const H* a,
             int64_t lda, const H* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // Stored shapes: A is (ta ? K x M : M x K), B is (tb ? N x K : K x N).
  auto af = widen(a, ta ? k : m, ta ? m : k, lda);
  auto bf = widen(b, tb ? n : k, tb ? k : n, ldb);
  chosen().sgemm(ta, tb, m, n, k, alpha, af.get(), ta ? m : k, bf.get(), tb ? k : n, beta, c, ldc);
}

}  // namespace

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  chosen().sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  registry();  // thread count
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
      r.chosen = be.get();
      return;
    }
  throw InvalidArgument("unknown gemm backend '" + name + "'");
}

int num_threads() { return registry().threads; }

void set_num_threads(int n) {
  CHORUS_ARG_CHECK(n >= 1, "set_num_threads(", n, ")");
  Registry& r = registry();
  r.threads = n;
  omp_set_num_threads(n);
  for (auto& be : r.backends) be->set_threads(n);
}

}  // namespace chorus::tensor
