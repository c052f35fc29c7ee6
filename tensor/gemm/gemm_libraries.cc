// GEMM backends opened at run time: oneDNN (dnnl_sgemm) and OpenBLAS (cblas_sgemm).
//
// dlopen instead of linking: a chorus binary then runs on machines that have neither library,
// chooses between them by measurement where both exist, and an outside project that links
// chorus needs no find_dependency for either. The two entry points used are stable across
// library versions (dnnl_sgemm is unchanged from oneDNN 1.x to 3.x; cblas_sgemm is CBLAS).
//
// Threads: chorus runs its own team (runtime/thread_pool.h) and calls a library once per row block
// from each team thread, so each library call must stay on its calling thread. OpenBLAS gets
// openblas_set_num_threads(1), and when chorus loaded it, the workers its pthreads build started
// then (one per core but one) are stopped at once (blas_thread_shutdown_; it starts them again
// if anything in the process asks it for more threads later): each busy-waits about 100 ms after
// the load, and with two cores that halved the team's GEMMs during the process's first 100 ms,
// the choice of kernels included (nn.large measured at 160-170 GFLOP/s instead of 350-450 on an
// Intel Xeon with AVX-512, and builtin chosen where oneDNN is 7-17% faster). oneDNN (the Debian
// build) runs its own OpenMP team sized by the calling thread's OpenMP setting, so each calling
// thread sets that to 1 once, through the OpenMP runtime oneDNN itself loaded.
#include <string>

#include "chorus/dynamic_library.h"
#include "chorus/error.h"
#include "gemm/backend.h"

namespace chorus::tensor::gemm_impl {
namespace {

// ---- oneDNN ---------------------------------------------------------------------------------
// dnnl_status_t dnnl_sgemm(char transa, char transb, dnnl_dim_t M, N, K, float alpha,
//                          const float* A, lda, const float* B, ldb, float beta, float* C, ldc)
// Row-major; dnnl_dim_t is int64_t; status 0 is success.
using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
using OmpSetNumThreads = void (*)(int);

class DnnlBackend final : public SgemmBackend {
 public:
  DnnlBackend() {
    lib_ = DynamicLibrary({"libdnnl.so.3", "libdnnl.so.2", "libdnnl.so"});
    if (!lib_) {
      note_ = "libdnnl not found (apt-get install libdnnl2 or libdnnl-dev)";
      return;
    }
    sgemm_ = lib_.symbol<DnnlSgemm>("dnnl_sgemm");
    note_ = sgemm_ ? lib_.soname() : lib_.soname() + " lacks dnnl_sgemm";
    omp_set_num_threads_ = loaded_omp_set_num_threads();
  }
  const char* name() const override { return "dnnl"; }
  std::string note() const override { return note_; }
  bool available() const override { return sgemm_ != nullptr; }
  void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
             int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) override {
    thread_local bool single_threaded = false;
    if (!single_threaded && omp_set_num_threads_) {
      omp_set_num_threads_(1);
      single_threaded = true;
    }
    const int status =
        sgemm_(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    CHORUS_CHECK(status == 0, "dnnl_sgemm failed with status ", status);
  }

 private:
  DynamicLibrary lib_;
  DnnlSgemm sgemm_ = nullptr;
  OmpSetNumThreads omp_set_num_threads_ = nullptr;
  std::string note_;
};

// ---- OpenBLAS -------------------------------------------------------------------------------
// void cblas_sgemm(order, transa, transb, int M, N, K, float alpha, const float* A, int lda,
//                  const float* B, int ldb, float beta, float* C, int ldc)
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                            int, float, float*, int);
using SetThreads = void (*)(int);
using StopWorkers = int (*)();
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112;

class OpenBlasBackend final : public SgemmBackend {
 public:
  OpenBlasBackend() {
    // Already loaded: another part of the process uses it, and its threads are that part's.
    const bool first_load = !DynamicLibrary::find_loaded({"libopenblas.so.0", "libopenblas.so"});
    lib_ = DynamicLibrary({"libopenblas.so.0", "libopenblas.so"});
    if (!lib_) {
      note_ = "libopenblas not found (apt-get install libopenblas0)";
      return;
    }
    sgemm_ = lib_.symbol<CblasSgemm>("cblas_sgemm");
    if (auto set_threads = lib_.symbol<SetThreads>("openblas_set_num_threads")) set_threads(1);
    if (first_load)
      if (auto stop_workers = lib_.symbol<StopWorkers>("blas_thread_shutdown_")) stop_workers();
    note_ = sgemm_ ? lib_.soname() : lib_.soname() + " lacks cblas_sgemm";
  }
  const char* name() const override { return "openblas"; }
  std::string note() const override { return note_; }
  bool available() const override { return sgemm_ != nullptr; }
  void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
             int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) override {
    CHORUS_ARG_CHECK(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX && lda <= INT32_MAX &&
                         ldb <= INT32_MAX && ldc <= INT32_MAX,
                     "cblas_sgemm: dimensions exceed 32-bit int");
    sgemm_(kCblasRowMajor, ta ? kCblasTrans : kCblasNoTrans, tb ? kCblasTrans : kCblasNoTrans,
           static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
           static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
  }

 private:
  DynamicLibrary lib_;
  CblasSgemm sgemm_ = nullptr;
  std::string note_;
};

}  // namespace

auto loaded_omp_set_num_threads() -> void (*)(int) {
  for (const char* so : {"libgomp.so.1", "libiomp5.so", "libomp.so.5", "libomp.so"}) {
    // Closing it again leaves it loaded: the library that pulled it in holds it.
    const DynamicLibrary omp = DynamicLibrary::find_loaded({so});
    if (auto fn = omp.symbol<OmpSetNumThreads>("omp_set_num_threads")) return fn;
  }
  return nullptr;
}

std::unique_ptr<SgemmBackend> make_dnnl_backend() { return std::make_unique<DnnlBackend>(); }
std::unique_ptr<SgemmBackend> make_openblas_backend() {
  return std::make_unique<OpenBlasBackend>();
}

}  // namespace chorus::tensor::gemm_impl
