#include "cuda/cublaslt.h"

#include <cublasLt.h>

#include <cstring>

#include "chorus/config.h"
#include "chorus/dynamic_library.h"
#include "chorus/error.h"
#include "chorus/gpu/runtime.h"

namespace chorus::tensor::cuda {
namespace {

const StringKnob kLibraryKnob{"CHORUS_TENSOR_CUBLASLT", "",
                              "the cuBLASLt library the CUDA tensor backend opens (a path or a "
                              "soname; default libcublasLt.so.13, .so.12, .so)"};

// Every cuBLASLt function used, resolved from the opened library.
struct Api {
  DynamicLibrary lib;
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtGetStatusString) status_string = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) layout_set = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  std::string error;  // empty when everything resolved
};

const Api& api() {
  static const Api* loaded = [] {
    auto* a = new Api();  // never closed: handles may outlive static destruction
    const auto chosen = kLibraryKnob.get_if_set();
    a->lib = chosen ? DynamicLibrary({chosen->c_str()})
                    : DynamicLibrary({"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"});
    if (!a->lib) {
      a->error = "cuBLASLt not found (" + a->lib.error() +
                 "; set CHORUS_TENSOR_CUBLASLT to the library's path)";
      return a;
    }
    std::string missing;
    auto get = [&](auto& fn, const char* name) {
      fn = a->lib.symbol<std::remove_reference_t<decltype(fn)>>(name);
      if (fn == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
    };
    get(a->create, "cublasLtCreate");
    get(a->destroy, "cublasLtDestroy");
    get(a->status_string, "cublasLtGetStatusString");
    get(a->desc_create, "cublasLtMatmulDescCreate");
    get(a->desc_destroy, "cublasLtMatmulDescDestroy");
    get(a->desc_set, "cublasLtMatmulDescSetAttribute");
    get(a->layout_create, "cublasLtMatrixLayoutCreate");
    get(a->layout_destroy, "cublasLtMatrixLayoutDestroy");
    get(a->layout_set, "cublasLtMatrixLayoutSetAttribute");
    get(a->pref_create, "cublasLtMatmulPreferenceCreate");
    get(a->pref_destroy, "cublasLtMatmulPreferenceDestroy");
    get(a->pref_set, "cublasLtMatmulPreferenceSetAttribute");
    get(a->heuristic, "cublasLtMatmulAlgoGetHeuristic");
    get(a->matmul, "cublasLtMatmul");
    if (!missing.empty()) a->error = a->lib.soname() + " lacks " + missing;
    return a;
  }();
  return *loaded;
}

const Api& checked_api() {
  const Api& a = api();
  if (!a.error.empty()) throw Error(ErrorKind::kSystem, "CUDA GEMM: " + a.error);
  return a;
}

void check(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const char* text = api().status_string ? api().status_string(status) : "unknown status";
  throw Error(ErrorKind::kSystem, detail::concat(call, ": ", text, " (", int(status), ")"));
}

cudaDataType_t cuda_type(DataType t) {
  switch (t) {
    case DataType::kF32:
      return CUDA_R_32F;
    case DataType::kF64:
      return CUDA_R_64F;
    case DataType::kBF16:
      return CUDA_R_16BF;
    case DataType::kF16:
      return CUDA_R_16F;
    default:
      throw InvalidArgument(detail::concat("CUDA GEMM: ", to_string(t), " operands"));
  }
}

// The largest power of two (up to 256) dividing the address and every batch stride in bytes: the
// alignment cuBLASLt may assume for that operand.
uint32_t alignment_of(const void* p, int64_t stride_elems, int64_t batch, size_t esize) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p) | 256;
  if (batch > 1) bits |= static_cast<uint64_t>(stride_elems) * esize;
  return static_cast<uint32_t>(bits & (~bits + 1));
}

// RAII for the descriptors of one call.
struct Descriptors {
  const Api& a;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descriptors() {
    if (pref) a.pref_destroy(pref);
    if (lc) a.layout_destroy(lc);
    if (lb) a.layout_destroy(lb);
    if (la) a.layout_destroy(la);
    if (desc) a.desc_destroy(desc);
  }
};

// A column-major layout of rows x cols at leading dimension ld, batched.
void make_layout(const Api& a, cublasLtMatrixLayout_t* out, DataType t, int64_t rows, int64_t cols,
                 int64_t ld, int64_t batch, int64_t stride) {
  check(a.layout_create(out, cuda_type(t), static_cast<uint64_t>(rows), static_cast<uint64_t>(cols),
                        ld),
        "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    check(a.layout_set(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
          "cublasLtMatrixLayoutSetAttribute");
    check(a.layout_set(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
          "cublasLtMatrixLayoutSetAttribute");
  }
}

}  // namespace

std::string CublasLt::load_error() { return api().error; }

CublasLt::CublasLt(int device) {
  const Api& a = checked_api();
  gpu::DeviceGuard on(device);
  gpu::set_device(device);  // the primary context current on this thread (see CudaBackend::lt)
  cublasLtHandle_t h = nullptr;
  check(a.create(&h), "cublasLtCreate");
  handle_ = h;
}

CublasLt::~CublasLt() {
  if (handle_ != nullptr) api().destroy(static_cast<cublasLtHandle_t>(handle_));
}

void CublasLt::matmul(const LtMatmul& mm, bool allow_tf32, void* workspace, size_t workspace_bytes,
                      void* stream) {
  if (mm.m == 0 || mm.n == 0 || mm.batch == 0) return;
  const Api& a = checked_api();
  const bool wide = mm.operands == DataType::kF64;
  CHORUS_ARG_CHECK(mm.output == (wide ? DataType::kF64 : DataType::kF32),
                   "CUDA GEMM: ", to_string(mm.operands), " operands into ", to_string(mm.output));
  const size_t esize = dtype_size(mm.operands);
  const bool tf32 = allow_tf32 && mm.operands == DataType::kF32;
  const cublasComputeType_t compute =
      wide ? CUBLAS_COMPUTE_64F : (tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);

  // Column-major: C^T (n x m) = op(B)^T (n x k) op(A)^T (k x m). B row-major (k x n, or n x k
  // when trans_b) is column-major (n x k, or k x n): not transposed exactly when !trans_b.
  const cublasOperation_t op_first = mm.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = mm.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  Descriptors d{a};
  check(a.desc_create(&d.desc, compute, wide ? CUDA_R_64F : CUDA_R_32F),
        "cublasLtMatmulDescCreate");
  check(a.desc_set(d.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)),
        "cublasLtMatmulDescSetAttribute");
  check(a.desc_set(d.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)),
        "cublasLtMatmulDescSetAttribute");
  // First operand (B): stored n x k when !trans_b, k x n when trans_b (column-major).
  make_layout(a, &d.la, mm.operands, mm.trans_b ? mm.k : mm.n, mm.trans_b ? mm.n : mm.k, mm.ldb,
              mm.batch, mm.stride_b);
  // Second operand (A): stored k x m when !trans_a, m x k when trans_a.
  make_layout(a, &d.lb, mm.operands, mm.trans_a ? mm.m : mm.k, mm.trans_a ? mm.k : mm.m, mm.lda,
              mm.batch, mm.stride_a);
  make_layout(a, &d.lc, mm.output, mm.n, mm.m, mm.ldc, mm.batch, mm.stride_c);

  const uint32_t align_first = alignment_of(mm.b, mm.stride_b, mm.batch, esize);
  const uint32_t align_second = alignment_of(mm.a, mm.stride_a, mm.batch, esize);
  const uint32_t align_c = alignment_of(mm.c, mm.stride_c, mm.batch, dtype_size(mm.output));
  const Key key{int(mm.operands),
                int(mm.output),
                int(compute),
                mm.trans_a,
                mm.trans_b,
                mm.m,
                mm.n,
                mm.k,
                mm.lda,
                mm.ldb,
                mm.ldc,
                mm.batch,
                mm.stride_a,
                mm.stride_b,
                mm.stride_c,
                int(align_first | (align_second << 9) | (align_c << 18)),
                mm.beta != 0};
  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard lock(mu_);
    auto it = algos_.find(key);
    if (it != algos_.end()) {
      std::memcpy(&algo, it->second.data(), sizeof(algo));
    } else {
      check(a.pref_create(&d.pref), "cublasLtMatmulPreferenceCreate");
      const uint64_t ws = workspace_bytes;
      check(a.pref_set(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
            "cublasLtMatmulPreferenceSetAttribute");
      check(a.pref_set(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_first,
                       sizeof(align_first)),
            "cublasLtMatmulPreferenceSetAttribute");
      check(a.pref_set(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_second,
                       sizeof(align_second)),
            "cublasLtMatmulPreferenceSetAttribute");
      check(
          a.pref_set(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)),
          "cublasLtMatmulPreferenceSetAttribute");
      check(
          a.pref_set(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)),
          "cublasLtMatmulPreferenceSetAttribute");
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      check(a.heuristic(static_cast<cublasLtHandle_t>(handle_), d.desc, d.la, d.lb, d.lc, d.lc,
                        d.pref, 1, &result, &found),
            "cublasLtMatmulAlgoGetHeuristic");
      if (found == 0 || result.state != CUBLAS_STATUS_SUCCESS)
        throw Error(
            ErrorKind::kSystem,
            detail::concat("CUDA GEMM: cuBLASLt has no algorithm for ", mm.m, "x", mm.n, "x", mm.k,
                           " (batch ", mm.batch, ", ", to_string(mm.operands), ")"));
      algo = result.algo;
      Algo kept;
      std::memcpy(kept.data(), &algo, sizeof(algo));
      algos_.emplace(key, kept);
    }
  }
  const float alpha32 = static_cast<float>(mm.alpha), beta32 = static_cast<float>(mm.beta);
  const void* alpha = wide ? static_cast<const void*>(&mm.alpha) : &alpha32;
  const void* beta = wide ? static_cast<const void*>(&mm.beta) : &beta32;
  check(a.matmul(static_cast<cublasLtHandle_t>(handle_), d.desc, alpha, mm.b, d.la, mm.a, d.lb,
                 beta, mm.c, d.lc, mm.c, d.lc, &algo, workspace, workspace_bytes,
                 static_cast<cudaStream_t>(stream)),
        "cublasLtMatmul");
}

}  // namespace chorus::tensor::cuda
