// The autocast bf16 GEMM through oneDNN's matmul primitive, the way PyTorch's autocast runs
// linear and bmm on the CPU: bf16 operands, f32 accumulation and output.
//
// Opened at run time like the f32 backends (gemm_libraries.cc), so nothing links oneDNN. The
// matmul primitive has no stable flat entry point the way dnnl_sgemm has: its C API changed in
// oneDNN 3.0 (opaque memory descriptors, primitive descriptors made per kind), so this file
// builds against the oneDNN 2.x header when one is installed (libdnnl-dev) and uses only a
// libdnnl.so.2 whose dnnl_version() agrees. Elsewhere the method reports itself unavailable
// and the selection (bf16_selection.cc) never picks it.
//
// Threads: as for sgemm, the rows of C are split over chorus's own team and each team thread
// runs a single-threaded primitive (its OpenMP setting set to 1 once) on its row block.
// A primitive is JIT-compiled for one shape; each thread keeps the primitives of the shapes it
// met (a training step has a handful), with memory objects whose data pointers are reset per
// call, and its own stream.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "chorus/dynamic_library.h"
#include "chorus/error.h"
#include "cpu/simd.h"
#include "gemm/backend.h"
#include "runtime/thread_pool.h"

#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>
#if DNNL_VERSION_MAJOR == 2
#define CHORUS_DNNL_MATMUL 1
#endif
#endif

namespace chorus::tensor::gemm_impl {

#ifdef CHORUS_DNNL_MATMUL
namespace {

// The oneDNN 2.x C entry points used, resolved from the library.
struct Api {
  decltype(&dnnl_version) version = nullptr;
  decltype(&dnnl_engine_create) engine_create = nullptr;
  decltype(&dnnl_stream_create) stream_create = nullptr;
  decltype(&dnnl_stream_destroy) stream_destroy = nullptr;
  decltype(&dnnl_memory_desc_init_by_strides) md_init = nullptr;
  decltype(&dnnl_matmul_desc_init) matmul_desc_init = nullptr;
  decltype(&dnnl_primitive_attr_create) attr_create = nullptr;
  decltype(&dnnl_primitive_attr_destroy) attr_destroy = nullptr;
  decltype(&dnnl_primitive_attr_set_output_scales) attr_set_output_scales = nullptr;
  decltype(&dnnl_primitive_desc_create) pd_create = nullptr;
  decltype(&dnnl_primitive_desc_destroy) pd_destroy = nullptr;
  decltype(&dnnl_primitive_create) primitive_create = nullptr;
  decltype(&dnnl_primitive_destroy) primitive_destroy = nullptr;
  decltype(&dnnl_primitive_execute) execute = nullptr;
  decltype(&dnnl_memory_create) memory_create = nullptr;
  decltype(&dnnl_memory_set_data_handle) memory_set = nullptr;
  decltype(&dnnl_memory_destroy) memory_destroy = nullptr;
  void (*omp_set_num_threads)(int) = nullptr;
};

// One primitive for one shape, with its three memory objects.
struct Matmul {
  const Api* api = nullptr;
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr;
  Matmul() = default;
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;
  ~Matmul() {
    if (api == nullptr) return;
    for (dnnl_memory_t m : {a, b, c})
      if (m) api->memory_destroy(m);
    if (primitive) api->primitive_destroy(primitive);
  }
};

constexpr size_t kMaxCachedShapes = 256;  // per thread

using ShapeKey =
    std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float>;

class DnnlMatmul {
 public:
  DnnlMatmul() {
    lib_ = DynamicLibrary({"libdnnl.so.2"});
    if (!lib_) {
      note_ = "libdnnl.so.2 not found (apt-get install libdnnl2)";
      return;
    }
    if (!resolve()) {
      note_ = lib_.soname() + " lacks the matmul entry points";
      return;
    }
    const dnnl_version_t* v = api_.version();
    if (v->major != DNNL_VERSION_MAJOR) {
      note_ = lib_.soname() + " is oneDNN " + std::to_string(v->major) + ", built for 2.x";
      return;
    }
    if (api_.engine_create(&engine_, dnnl_cpu, 0) != dnnl_success) {
      note_ = "dnnl_engine_create failed";
      return;
    }
    version_ =
        std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
    // A probe: the CPU may lack what oneDNN's bf16 matmul needs (AVX-512 at least).
    Matmul probe;
    if (!create(probe, false, true, 32, 32, 32, 32, 32, 32, 1.f)) {
      note_ = "oneDNN " + version_ + " has no bf16 matmul for this CPU";
      return;
    }
    available_ = true;
    note_ = lib_.soname() + " (oneDNN " + version_ + " matmul)";
  }
  ~DnnlMatmul() = default;  // the engine lives as long as the process: threads' caches use it

  bool available() const { return available_; }
  const std::string& note() const { return note_; }

  // c (m x n, row stride ldc) = alpha op(a) op(b) on the calling thread, in f32.
  void run(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
           int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc) {
    thread_local std::map<ShapeKey, std::unique_ptr<Matmul>> cache;
    thread_local dnnl_stream_t stream = nullptr;
    if (stream == nullptr) {
      if (api_.omp_set_num_threads) api_.omp_set_num_threads(1);
      CHORUS_CHECK(api_.stream_create(&stream, engine_, dnnl_stream_default_flags) == dnnl_success,
                   "dnnl_stream_create failed");
    }
    // A step has a handful of shapes; a workload whose shapes keep changing starts over
    // rather than growing without bound.
    if (cache.size() >= kMaxCachedShapes) cache.clear();
    auto& slot = cache[ShapeKey{ta, tb, m, n, k, lda, ldb, ldc, alpha}];
    if (!slot) {
      slot = std::make_unique<Matmul>();
      CHORUS_CHECK(create(*slot, ta, tb, m, n, k, lda, ldb, ldc, alpha),
                   "oneDNN bf16 matmul: no primitive for ", m, "x", n, "x", k);
    }
    api_.memory_set(slot->a, const_cast<uint16_t*>(a));
    api_.memory_set(slot->b, const_cast<uint16_t*>(b));
    api_.memory_set(slot->c, c);
    const dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, slot->a}, {DNNL_ARG_WEIGHTS, slot->b}, {DNNL_ARG_DST, slot->c}};
    const dnnl_status_t st = api_.execute(slot->primitive, stream, 3, args);
    CHORUS_CHECK(st == dnnl_success, "oneDNN bf16 matmul failed with status ",
                 static_cast<int>(st));
  }

 private:
  bool resolve() {
    api_.version = lib_.symbol<decltype(api_.version)>("dnnl_version");
    api_.engine_create = lib_.symbol<decltype(api_.engine_create)>("dnnl_engine_create");
    api_.stream_create = lib_.symbol<decltype(api_.stream_create)>("dnnl_stream_create");
    api_.stream_destroy = lib_.symbol<decltype(api_.stream_destroy)>("dnnl_stream_destroy");
    api_.md_init = lib_.symbol<decltype(api_.md_init)>("dnnl_memory_desc_init_by_strides");
    api_.matmul_desc_init = lib_.symbol<decltype(api_.matmul_desc_init)>("dnnl_matmul_desc_init");
    api_.attr_create = lib_.symbol<decltype(api_.attr_create)>("dnnl_primitive_attr_create");
    api_.attr_destroy = lib_.symbol<decltype(api_.attr_destroy)>("dnnl_primitive_attr_destroy");
    api_.attr_set_output_scales =
        lib_.symbol<decltype(api_.attr_set_output_scales)>("dnnl_primitive_attr_set_output_scales");
    api_.pd_create = lib_.symbol<decltype(api_.pd_create)>("dnnl_primitive_desc_create");
    api_.pd_destroy = lib_.symbol<decltype(api_.pd_destroy)>("dnnl_primitive_desc_destroy");
    api_.primitive_create = lib_.symbol<decltype(api_.primitive_create)>("dnnl_primitive_create");
    api_.primitive_destroy =
        lib_.symbol<decltype(api_.primitive_destroy)>("dnnl_primitive_destroy");
    api_.execute = lib_.symbol<decltype(api_.execute)>("dnnl_primitive_execute");
    api_.memory_create = lib_.symbol<decltype(api_.memory_create)>("dnnl_memory_create");
    api_.memory_set = lib_.symbol<decltype(api_.memory_set)>("dnnl_memory_set_data_handle");
    api_.memory_destroy = lib_.symbol<decltype(api_.memory_destroy)>("dnnl_memory_destroy");
    api_.omp_set_num_threads = loaded_omp_set_num_threads();
    return api_.version && api_.engine_create && api_.stream_create && api_.md_init &&
           api_.matmul_desc_init && api_.attr_create && api_.attr_destroy &&
           api_.attr_set_output_scales && api_.pd_create && api_.pd_destroy &&
           api_.primitive_create && api_.primitive_destroy && api_.execute && api_.memory_create &&
           api_.memory_set && api_.memory_destroy;
  }

  // Builds the primitive and memory objects of one shape; false when oneDNN declines.
  bool create(Matmul& mm, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda,
              int64_t ldb, int64_t ldc, float alpha) {
    // op(A) is m x k: A stored (ta ? k x m : m x k) with row stride lda; likewise B.
    const dnnl_dims_t a_dims = {m, k}, b_dims = {k, n}, c_dims = {m, n};
    const dnnl_dims_t a_strides = {ta ? 1 : lda, ta ? lda : 1};
    const dnnl_dims_t b_strides = {tb ? 1 : ldb, tb ? ldb : 1};
    const dnnl_dims_t c_strides = {ldc, 1};
    dnnl_memory_desc_t a_md, b_md, c_md;
    if (api_.md_init(&a_md, 2, a_dims, dnnl_bf16, a_strides) != dnnl_success ||
        api_.md_init(&b_md, 2, b_dims, dnnl_bf16, b_strides) != dnnl_success ||
        api_.md_init(&c_md, 2, c_dims, dnnl_f32, c_strides) != dnnl_success)
      return false;
    dnnl_matmul_desc_t desc;
    if (api_.matmul_desc_init(&desc, &a_md, &b_md, nullptr, &c_md) != dnnl_success) return false;
    dnnl_primitive_attr_t attr = nullptr;
    if (api_.attr_create(&attr) != dnnl_success) return false;
    bool ok = alpha == 1.f || api_.attr_set_output_scales(attr, 1, 0, &alpha) == dnnl_success;
    dnnl_primitive_desc_t pd = nullptr;
    ok = ok && api_.pd_create(&pd, &desc, attr, engine_, nullptr) == dnnl_success;
    api_.attr_destroy(attr);
    if (!ok) return false;
    mm.api = &api_;
    ok = api_.primitive_create(&mm.primitive, pd) == dnnl_success &&
         api_.memory_create(&mm.a, &a_md, engine_, DNNL_MEMORY_NONE) == dnnl_success &&
         api_.memory_create(&mm.b, &b_md, engine_, DNNL_MEMORY_NONE) == dnnl_success &&
         api_.memory_create(&mm.c, &c_md, engine_, DNNL_MEMORY_NONE) == dnnl_success;
    api_.pd_destroy(pd);
    return ok;
  }

  DynamicLibrary lib_;
  Api api_;
  dnnl_engine_t engine_ = nullptr;
  bool available_ = false;
  std::string note_, version_;
};

DnnlMatmul& dnnl_matmul() {
  static DnnlMatmul* m = new DnnlMatmul;  // never destroyed: threads' caches outlive statics
  return *m;
}

}  // namespace

bool dnnl_bf16_available() { return dnnl_matmul().available(); }
std::string dnnl_bf16_note() { return dnnl_matmul().note(); }

void dnnl_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                    const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float* c,
                    int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.f);
    return;
  }
  DnnlMatmul& mm = dnnl_matmul();
  CHORUS_CHECK(mm.available(), "oneDNN bf16 matmul unavailable: ", mm.note());
  // Row blocks of at least 16 rows, one per team thread; op(A)'s rows start at a + i0 * lda
  // (A) or a + i0 (A^T).
  parallel_for((m + 15) / 16, 32 * n * k, [&](int64_t s, int64_t e, int) {
    const int64_t i0 = s * 16, i1 = std::min(m, e * 16);
    mm.run(ta, tb, i1 - i0, n, k, alpha, ta ? a + i0 : a + i0 * lda, lda, b, ldb, c + i0 * ldc,
           ldc);
  });
}

#else  // no oneDNN 2.x header at build time

bool dnnl_bf16_available() { return false; }
std::string dnnl_bf16_note() { return "built without the oneDNN 2.x header (libdnnl-dev)"; }
void dnnl_gemm_bf16(bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                    const uint16_t*, int64_t, float*, int64_t) {
  CHORUS_CHECK(false, "oneDNN bf16 matmul unavailable: ", dnnl_bf16_note());
}

#endif

}  // namespace chorus::tensor::gemm_impl
