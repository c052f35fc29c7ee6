#include "cuda/backend.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "chorus/tensor/gemm.h"
#include "cuda/kernels.h"

namespace chorus::tensor {
namespace {

void* ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// The element `offset` elements after t's first one.
void* at(const Tensor& t, int64_t offset) {
  return static_cast<char*>(t.data_ptr()) + offset * static_cast<int64_t>(dtype_size(t.dtype()));
}

void check_float(const Tensor& t, const char* kernel) {
  CHORUS_ARG_CHECK(t.dtype() == DataType::kF32 || t.dtype() == DataType::kF64, kernel,
                   " on CUDA: dtype ", to_string(t.dtype()), " (f32 or f64)");
}

// The copy layout of dst and src (one shape): size-1 dims dropped, dims merged where both sides
// are contiguous across them.
cuda::Layout layout_of(const Tensor& dst, const Tensor* src) {
  struct Dim {
    int64_t size, dst, src;
  };
  std::vector<Dim> dims;
  for (int64_t d = 0; d < dst.dim(); ++d)
    if (dst.size(d) != 1) dims.push_back({dst.size(d), dst.stride(d), src ? src->stride(d) : 0});
  std::vector<Dim> merged;
  for (const Dim& d : dims) {
    if (!merged.empty()) {
      Dim& outer = merged.back();
      if (outer.dst == d.dst * d.size && outer.src == d.src * d.size) {
        outer = {outer.size * d.size, d.dst, d.src};
        continue;
      }
    }
    merged.push_back(d);
  }
  CHORUS_ARG_CHECK(merged.size() <= static_cast<size_t>(cuda::kMaxDims),
                   "CUDA copy: ", merged.size(), " dims that do not merge (at most ",
                   cuda::kMaxDims, ")");
  cuda::Layout l;
  l.ndim = static_cast<int>(merged.size());
  for (size_t i = 0; i < merged.size(); ++i) {
    l.shape[i] = merged[i].size;
    l.dst[i] = merged[i].dst;
    l.src[i] = merged[i].src;
  }
  return l;
}

// A (batch, rows, cols) block at strides (stride, ld, 1) as a fill layout.
cuda::Layout matrix_layout(int64_t batch, int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
  cuda::Layout l;
  l.ndim = 3;
  l.shape[0] = batch;
  l.shape[1] = rows;
  l.shape[2] = cols;
  l.dst[0] = stride;
  l.dst[1] = ld;
  l.dst[2] = 1;
  return l;
}

}  // namespace

std::unique_ptr<Backend> make_device_backend(Device device) {
  if (device.type == DeviceType::kCUDA) return std::make_unique<CudaBackend>(device);
  return std::make_unique<DeviceBackend>(device);
}

CudaBackend::CudaBackend(Device device) : DeviceBackend(device) {}

CudaBackend::~CudaBackend() = default;

Tensor CudaBackend::scratch(size_t bytes) {
  return Tensor::empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, DataType::kU8, device());
}

void CudaBackend::lt(cuda::LtMatmul mm) {
  std::call_once(lt_once_, [&] {
    lt_ = std::make_unique<cuda::CublasLt>(ordinal());
    workspace_ = scratch(cuda::CublasLt::kWorkspaceBytes);
  });
  gpu::DeviceGuard on(ordinal());
  // cuBLASLt runs on the thread's current context: set_device makes the device's primary context
  // current on this thread even when the runtime already counts the device as current.
  gpu::set_device(ordinal());
  lt_->matmul(mm, allow_tf32(), workspace_.data_ptr(), cuda::CublasLt::kWorkspaceBytes,
              stream().native);
}

// ---- copies and fills ---------------------------------------------------------------------------

void CudaBackend::copy(const Tensor& dst, const Tensor& src, bool accumulate) {
  if (!accumulate && dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    DeviceBackend::copy(dst, src, false);
    return;
  }
  gpu::DeviceGuard on(ordinal());
  cuda::strided_copy(dst.dtype(), dst.data_ptr(), src.dtype(), src.data_ptr(), layout_of(dst, &src),
                     accumulate, stream().native);
}

void CudaBackend::fill(const Tensor& t, double value) {
  if (value == 0.0 && t.is_contiguous()) {
    zero(t);
    return;
  }
  gpu::DeviceGuard on(ordinal());
  cuda::fill(t.dtype(), t.data_ptr(), layout_of(t, nullptr), value, stream().native);
}

// ---- element-wise -------------------------------------------------------------------------------

void CudaBackend::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  gpu::DeviceGuard on(ordinal());
  cuda::binary(cuda::Binary::kAdd, a.dtype(), out.data_ptr(), a.data_ptr(), b.data_ptr(), a.numel(),
               stream().native);
}

void CudaBackend::sub(const Tensor& out, const Tensor& a, const Tensor& b) {
  gpu::DeviceGuard on(ordinal());
  cuda::binary(cuda::Binary::kSub, a.dtype(), out.data_ptr(), a.data_ptr(), b.data_ptr(), a.numel(),
               stream().native);
}

void CudaBackend::mul(const Tensor& out, const Tensor& a, const Tensor& b) {
  gpu::DeviceGuard on(ordinal());
  cuda::binary(cuda::Binary::kMul, a.dtype(), out.data_ptr(), a.data_ptr(), b.data_ptr(), a.numel(),
               stream().native);
}

void CudaBackend::mul_backward(const Tensor& da, const Tensor& db, const Tensor& a, const Tensor& b,
                               const Tensor& dy) {
  gpu::DeviceGuard on(ordinal());
  cuda::mul_backward(dy.dtype(), ptr(da), ptr(db), a.data_ptr(), b.data_ptr(), dy.data_ptr(),
                     dy.numel(), stream().native);
}

void CudaBackend::scale(const Tensor& out, const Tensor& a, double s) {
  gpu::DeviceGuard on(ordinal());
  cuda::scale(a.dtype(), out.data_ptr(), a.data_ptr(), s, a.numel(), stream().native);
}

void CudaBackend::axpy(const Tensor& y, double alpha, const Tensor& x) {
  gpu::DeviceGuard on(ordinal());
  cuda::axpy(y.dtype(), y.data_ptr(), alpha, x.data_ptr(), x.numel(), stream().native);
}

void CudaBackend::dropout(const Tensor& out, const Tensor& x, double p, RngKey key,
                          bool accumulate) {
  check_float(x, "dropout");
  gpu::DeviceGuard on(ordinal());
  cuda::dropout(x.dtype(), out.data_ptr(), x.data_ptr(), x.numel(), p, key.seed, key.stream,
                accumulate, stream().native);
}

void CudaBackend::gelu_forward(const Tensor& out, const Tensor& x) {
  gpu::DeviceGuard on(ordinal());
  cuda::gelu_forward(x.dtype(), out.data_ptr(), x.data_ptr(), x.numel(), stream().native);
}

void CudaBackend::gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dy) {
  gpu::DeviceGuard on(ordinal());
  cuda::gelu_backward(x.dtype(), dx.data_ptr(), x.data_ptr(), dy.data_ptr(), x.numel(),
                      stream().native);
}

void CudaBackend::add_bias(const Tensor& out, const Tensor& x, const Tensor& bias) {
  const int64_t C = bias.numel(), N = C == 0 ? 0 : x.numel() / C;
  gpu::DeviceGuard on(ordinal());
  cuda::add_bias(x.dtype(), out.data_ptr(), x.data_ptr(), bias.data_ptr(), N, C, stream().native);
}

void CudaBackend::sum_rows(const Tensor& dbias, const Tensor& dy, bool assign) {
  const int64_t C = dbias.numel(), N = C == 0 ? 0 : dy.numel() / C;
  const Tensor work = scratch(cuda::column_sums_scratch_bytes(dy.dtype(), N, C));
  gpu::DeviceGuard on(ordinal());
  cuda::column_sums(dy.dtype(), dbias.data_ptr(), dy.data_ptr(), N, C, assign, work.data_ptr(),
                    stream().native);
}

// ---- reductions ---------------------------------------------------------------------------------

void CudaBackend::sum(const Tensor& out, const Tensor& x, double factor) {
  const Tensor work = scratch(cuda::sum_scratch_bytes());
  gpu::DeviceGuard on(ordinal());
  cuda::sum(x.dtype(), out.data_ptr(), x.data_ptr(), x.numel(), factor, work.data_ptr(),
            stream().native);
}

void CudaBackend::add_scalar(const Tensor& dx, const Tensor& dy, double factor) {
  gpu::DeviceGuard on(ordinal());
  cuda::add_scalar(dx.dtype(), dx.data_ptr(), dy.data_ptr(), factor, dx.numel(), stream().native);
}

double CudaBackend::sum_squares(std::span<const Tensor> tensors) {
  std::vector<cuda::SquaresInput> inputs;
  inputs.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    check_float(t, "sum_squares");
    inputs.push_back({t.data_ptr(), t.dtype(), t.numel()});
  }
  const Tensor work = scratch(cuda::sum_squares_scratch_bytes(inputs.size()));
  const Tensor result = Tensor::empty({1}, DataType::kF64, device());
  {
    gpu::DeviceGuard on(ordinal());
    cuda::sum_squares(inputs.data(), inputs.size(), static_cast<double*>(result.data_ptr()),
                      work.data_ptr(), stream().native);
  }
  double host = 0;
  copy_to_host(&host, result);
  return host;
}

float CudaBackend::max_abs(const Tensor& x) {
  float host = 0;
  if (x.numel() == 0) return host;
  const Tensor work = scratch(cuda::norm_scratch_bytes());
  const Tensor result = Tensor::empty({1}, DataType::kF32, device());
  {
    gpu::DeviceGuard on(ordinal());
    cuda::max_abs(x.dtype(), x.data_ptr(), x.numel(), static_cast<float*>(result.data_ptr()),
                  work.data_ptr(), stream().native);
  }
  copy_to_host(&host, result);
  return host;
}

optim::U128 CudaBackend::square_units(const Tensor& x, int scale_exponent) {
  const double scale = std::ldexp(1.0, scale_exponent);
  constexpr int64_t kPass = int64_t{1} << 31;  // elements per pass: no limb sum overflows
  const Tensor work = scratch(cuda::norm_scratch_bytes());
  const Tensor limbs = Tensor::empty({4}, DataType::kI64, device());
  optim::U128 total = 0;
  for (int64_t begin = 0; begin < x.numel(); begin += kPass) {
    const int64_t n = std::min(kPass, x.numel() - begin);
    {
      gpu::DeviceGuard on(ordinal());
      cuda::square_limbs(x.dtype(), at(x, begin), n, scale,
                         static_cast<uint64_t*>(limbs.data_ptr()), work.data_ptr(),
                         stream().native);
    }
    uint64_t host[4] = {};
    copy_to_host(host, limbs);
    for (int k = 0; k < 4; ++k) total += static_cast<optim::U128>(host[k]) << (32 * k);
  }
  return total;
}

// ---- matrix products ----------------------------------------------------------------------------

void CudaBackend::gemm(const GemmArgs& g) {
  check_float(g.c, "gemm");
  gpu::DeviceGuard on(ordinal());
  if (g.k == 0) {  // an empty sum: C = 0, or C unchanged
    if (!g.accumulate)
      cuda::fill(g.c.dtype(), g.c.data_ptr(), matrix_layout(g.batch, g.m, g.n, g.ldc, g.stride_c),
                 0.0, stream().native);
    return;
  }
  lt({g.trans_a, g.trans_b, g.m, g.n, g.k, g.a.data_ptr(), g.lda, g.stride_a, g.b.data_ptr(), g.ldb,
      g.stride_b, g.c.data_ptr(), g.ldc, g.stride_c, g.batch, g.c.dtype(), g.c.dtype(), 1.0,
      g.accumulate ? 1.0 : 0.0});
}

Tensor CudaBackend::autocast_operand(const Tensor& x, DataType lowp) {
  CHORUS_ARG_CHECK(x.dtype() == DataType::kF32, "autocast operand must be f32");
  Tensor out = Tensor::empty(x.shape(), lowp, device());
  copy(out, x, /*accumulate=*/false);
  return out;
}

void CudaBackend::gemm_autocast(DataType lowp, const GemmArgs& g) {
  CHORUS_CHECK(g.ldc == g.n && (g.batch == 1 || g.stride_c == g.m * g.n),
               "the CUDA autocast GEMM writes dense rows of n elements");
  const int64_t count = g.batch * g.m * g.n;
  gpu::DeviceGuard on(ordinal());
  if (g.k == 0) {
    if (!g.accumulate)
      cuda::fill(DataType::kF32, g.c.data_ptr(), matrix_layout(1, 1, count, count, 0), 0.0,
                 stream().native);
    return;
  }
  // The product in f32, then rounded to the 16-bit type as it is stored or added (the CPU's
  // autocast GEMM does the same: cpu/autocast_gemm.cc).
  const Tensor product = g.accumulate ? Tensor::empty({count}, DataType::kF32, device()) : g.c;
  lt({g.trans_a, g.trans_b, g.m, g.n, g.k, g.a.data_ptr(), g.lda, g.stride_a, g.b.data_ptr(), g.ldb,
      g.stride_b, product.data_ptr(), g.n, g.m * g.n, g.batch, g.a.dtype(), DataType::kF32, 1.0,
      0.0});
  cuda::round_to(lowp, static_cast<float*>(g.c.data_ptr()),
                 static_cast<const float*>(product.data_ptr()), count, g.accumulate,
                 stream().native);
}

// ---- attention ----------------------------------------------------------------------------------
//
// cpu/attention.cc's steps as batched GEMMs over the heads: S = q k^T / sqrt(HS) into att, the
// causal softmax in place, out = att v; backward dP = dy v^T, dv (+)= att^T dy, dS = softmax
// gradient of dP, dq (+)= dS k, dk (+)= dS^T q. Operands are (B, NH, T, HS) views: a batch over
// the NH heads of one b has stride stride(1); when stride(0) = NH stride(1) for every operand,
// one call covers all B * NH.

namespace {

struct Heads {
  int64_t B, NH, Tn, HS;
  bool uniform;  // every operand's heads are evenly spaced across b
};

// 1 / sqrt(HS) in the dtype's precision, as the CPU computes it: T(1) / std::sqrt(T(HS)).
double scale_of(DataType dt, int64_t HS) {
  return dt == DataType::kF32 ? double(1.0f / std::sqrt(static_cast<float>(HS)))
                              : 1.0 / std::sqrt(static_cast<double>(HS));
}

Heads heads_of(std::initializer_list<const Tensor*> views) {
  const Tensor& q = **views.begin();
  Heads h{q.size(0), q.size(1), q.size(2), q.size(3), true};
  for (const Tensor* t : views) h.uniform = h.uniform && t->stride(0) == h.NH * t->stride(1);
  return h;
}

}  // namespace

void CudaBackend::attention_forward(const Tensor& out, const Tensor& att, const Tensor& q,
                                    const Tensor& k, const Tensor& v) {
  check_float(q, "attention_forward");
  const Heads h = heads_of({&out, &q, &k, &v});
  const DataType dt = q.dtype();
  const double scale = scale_of(dt, h.HS);
  const int64_t sq = h.Tn * h.Tn;
  const int64_t calls = h.uniform ? 1 : h.B, batch = h.uniform ? h.B * h.NH : h.NH;
  for (int64_t b = 0; b < calls; ++b)
    lt({false, true, h.Tn, h.Tn, h.HS, at(q, b * q.stride(0)), q.stride(2), q.stride(1),
        at(k, b * k.stride(0)), k.stride(2), k.stride(1), at(att, b * h.NH * sq), h.Tn, sq, batch,
        dt, dt, scale, 0.0});
  {
    gpu::DeviceGuard on(ordinal());
    cuda::causal_softmax(dt, att.data_ptr(), h.B * h.NH, h.Tn, stream().native);
  }
  for (int64_t b = 0; b < calls; ++b)
    lt({false, false, h.Tn, h.HS, h.Tn, at(att, b * h.NH * sq), h.Tn, sq, at(v, b * v.stride(0)),
        v.stride(2), v.stride(1), at(out, b * out.stride(0)), out.stride(2), out.stride(1), batch,
        dt, dt, 1.0, 0.0});
}

void CudaBackend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                     bool assign, const Tensor& dy, const Tensor& att,
                                     const Tensor& q, const Tensor& k, const Tensor& v) {
  check_float(q, "attention_backward");
  const Heads h = heads_of({&dq, &dk, &dv, &dy, &q, &k, &v});
  const DataType dt = q.dtype();
  const int64_t sq = h.Tn * h.Tn;
  const int64_t calls = h.uniform ? 1 : h.B, batch = h.uniform ? h.B * h.NH : h.NH;
  const double beta = assign ? 0.0 : 1.0;
  const double scale = scale_of(dt, h.HS);
  const Tensor dp = Tensor::empty({h.B * h.NH, h.Tn, h.Tn}, dt, device());
  for (int64_t b = 0; b < calls; ++b) {
    const int64_t p0 = b * h.NH * sq;
    // dP = dy v^T
    lt({false, true, h.Tn, h.Tn, h.HS, at(dy, b * dy.stride(0)), dy.stride(2), dy.stride(1),
        at(v, b * v.stride(0)), v.stride(2), v.stride(1), at(dp, p0), h.Tn, sq, batch, dt, dt, 1.0,
        0.0});
    // dv (+)= att^T dy
    lt({true, false, h.Tn, h.HS, h.Tn, at(att, p0), h.Tn, sq, at(dy, b * dy.stride(0)),
        dy.stride(2), dy.stride(1), at(dv, b * dv.stride(0)), dv.stride(2), dv.stride(1), batch, dt,
        dt, 1.0, beta});
  }
  {
    gpu::DeviceGuard on(ordinal());
    cuda::softmax_grad(dt, dp.data_ptr(), att.data_ptr(), h.B * h.NH, h.Tn, scale, stream().native);
  }
  for (int64_t b = 0; b < calls; ++b) {
    const int64_t p0 = b * h.NH * sq;
    // dq (+)= dS k
    lt({false, false, h.Tn, h.HS, h.Tn, at(dp, p0), h.Tn, sq, at(k, b * k.stride(0)), k.stride(2),
        k.stride(1), at(dq, b * dq.stride(0)), dq.stride(2), dq.stride(1), batch, dt, dt, 1.0,
        beta});
    // dk (+)= dS^T q
    lt({true, false, h.Tn, h.HS, h.Tn, at(dp, p0), h.Tn, sq, at(q, b * q.stride(0)), q.stride(2),
        q.stride(1), at(dk, b * dk.stride(0)), dk.stride(2), dk.stride(1), batch, dt, dt, 1.0,
        beta});
  }
}

// The fused kernels (cuda/flash_attention.cu): no (B, NH, T, T) buffer, any strides outside the
// head dimension.

namespace {

cuda::HeadsOperand heads_operand(const Tensor& t) {
  return {t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)};
}

}  // namespace

bool CudaBackend::has_fused_attention(DataType dtype, int64_t head_size) const {
  return cuda::flash_attention_supported(dtype, head_size, ordinal());
}

void CudaBackend::fused_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q,
                                          const Tensor& k, const Tensor& v) {
  check_float(q, "fused_attention_forward");
  const Heads h = heads_of({&q});
  gpu::DeviceGuard on(ordinal());
  cuda::flash_attention_forward(q.dtype(), heads_operand(out), lse.data_ptr(), heads_operand(q),
                                heads_operand(k), heads_operand(v), {h.B, h.NH, h.Tn, h.HS},
                                scale_of(q.dtype(), h.HS), stream().native);
}

void CudaBackend::fused_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                           bool assign, const Tensor& dy, const Tensor& out,
                                           const Tensor& lse, const Tensor& q, const Tensor& k,
                                           const Tensor& v) {
  check_float(q, "fused_attention_backward");
  const Heads h = heads_of({&q});
  const cuda::HeadsShape shape{h.B, h.NH, h.Tn, h.HS};
  const Tensor work = scratch(cuda::flash_attention_scratch_bytes(q.dtype(), shape));
  gpu::DeviceGuard on(ordinal());
  cuda::flash_attention_backward(q.dtype(), heads_operand(dq), heads_operand(dk), heads_operand(dv),
                                 assign, heads_operand(dy), heads_operand(out), lse.data_ptr(),
                                 heads_operand(q), heads_operand(k), heads_operand(v), shape,
                                 scale_of(q.dtype(), h.HS), work.data_ptr(), stream().native);
}

// ---- layernorm, softmax, cross-entropy ----------------------------------------------------------

void CudaBackend::layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                    const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    double eps) {
  gpu::DeviceGuard on(ordinal());
  cuda::layernorm_forward(x.dtype(), out.data_ptr(), mean.data_ptr(), rstd.data_ptr(), x.data_ptr(),
                          weight.data_ptr(), bias.data_ptr(), mean.numel(), weight.numel(), eps,
                          stream().native);
}

void CudaBackend::layernorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                     const Tensor& dy, const Tensor& x, const Tensor& weight,
                                     const Tensor& mean, const Tensor& rstd) {
  const int64_t N = mean.numel(), C = weight.numel();
  const Tensor work = dweight.defined() || dbias.defined()
                          ? scratch(cuda::layernorm_scratch_bytes(dy.dtype(), N, C))
                          : Tensor();
  gpu::DeviceGuard on(ordinal());
  cuda::layernorm_backward(dy.dtype(), ptr(dx), ptr(dweight), ptr(dbias), dy.data_ptr(),
                           x.data_ptr(), weight.data_ptr(), mean.data_ptr(), rstd.data_ptr(), N, C,
                           ptr(work), stream().native);
}

void CudaBackend::softmax_forward(const Tensor& y, const Tensor& x) {
  const int64_t V = x.size(-1), N = x.numel() / std::max<int64_t>(V, 1);
  gpu::DeviceGuard on(ordinal());
  cuda::softmax_forward(x.dtype(), y.data_ptr(), x.data_ptr(), N, V, stream().native);
}

void CudaBackend::softmax_backward(const Tensor& dx, const Tensor& y, const Tensor& dy) {
  const int64_t V = y.size(-1), N = y.numel() / std::max<int64_t>(V, 1);
  gpu::DeviceGuard on(ordinal());
  cuda::softmax_backward(dy.dtype(), dx.data_ptr(), y.data_ptr(), dy.data_ptr(), N, V,
                         stream().native);
}

void CudaBackend::row_max(const Tensor& row_max, const Tensor& logits) {
  gpu::DeviceGuard on(ordinal());
  cuda::row_max(logits.dtype(), row_max.data_ptr(), logits.data_ptr(), logits.size(0),
                logits.size(1), stream().native);
}

void CudaBackend::exp_sums_and_target(const Tensor& sums, const Tensor& logits,
                                      const Tensor& row_max, const Tensor& targets,
                                      int64_t vocab_start) {
  gpu::DeviceGuard on(ordinal());
  cuda::exp_sums_and_target(logits.dtype(), targets.dtype(), sums.data_ptr(), logits.data_ptr(),
                            row_max.data_ptr(), targets.data_ptr(), vocab_start, logits.size(0),
                            logits.size(1), stream().native);
}

void CudaBackend::cross_entropy_loss(const Tensor& loss, const Tensor& sums,
                                     const Tensor& row_max) {
  gpu::DeviceGuard on(ordinal());
  cuda::cross_entropy_loss(loss.dtype(), loss.data_ptr(), sums.data_ptr(), row_max.data_ptr(),
                           row_max.numel(), stream().native);
}

void CudaBackend::cross_entropy_backward(const Tensor& dlogits, const Tensor& logits,
                                         const Tensor& row_max, const Tensor& sums,
                                         const Tensor& targets, int64_t vocab_start,
                                         const Tensor& dloss) {
  gpu::DeviceGuard on(ordinal());
  cuda::cross_entropy_backward(dlogits.dtype(), targets.dtype(), dlogits.data_ptr(),
                               logits.data_ptr(), row_max.data_ptr(), sums.data_ptr(),
                               targets.data_ptr(), vocab_start, logits.size(0), logits.size(1),
                               dloss.data_ptr(), stream().native);
}

// ---- embedding ----------------------------------------------------------------------------------

void CudaBackend::embedding_forward(const Tensor& out, const Tensor& idx, const Tensor& weight) {
  const int64_t N = idx.numel(), V = weight.size(0);
  if (N > 0) {
    // The bounds check the CPU makes row by row: the indices' range, read back.
    const Tensor range = Tensor::empty({2}, DataType::kI64, device());
    {
      gpu::DeviceGuard on(ordinal());
      cuda::index_range(idx.dtype(), idx.data_ptr(), N, static_cast<int64_t*>(range.data_ptr()),
                        stream().native);
    }
    int64_t host[2] = {0, 0};
    copy_to_host(host, range);
    CHORUS_ARG_CHECK(host[0] >= 0 && host[1] < V, "embedding: index ",
                     host[0] < 0 ? host[0] : host[1], " outside [0, ", V, ")");
  }
  gpu::DeviceGuard on(ordinal());
  cuda::embedding_forward(idx.dtype(), out.data_ptr(), idx.data_ptr(), weight.data_ptr(), N,
                          static_cast<size_t>(weight.size(1)) * dtype_size(weight.dtype()),
                          stream().native);
}

void CudaBackend::embedding_backward(const Tensor& dweight, const Tensor& idx, const Tensor& dy) {
  check_float(dweight, "embedding_backward");
  const int64_t N = idx.numel(), C = dweight.size(1);
  if (N == 0) return;
  // The rows of dy grouped by the weight row they add to, each group in index order (the CPU's
  // order of additions), built on the host from the indices.
  std::vector<int64_t> ids(static_cast<size_t>(N));
  if (idx.dtype() == DataType::kI64) {
    copy_to_host(ids.data(), idx);
  } else {
    std::vector<int32_t> narrow(static_cast<size_t>(N));
    copy_to_host(narrow.data(), idx);
    std::copy(narrow.begin(), narrow.end(), ids.begin());
  }
  std::vector<int64_t> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return ids[a] < ids[b]; });
  std::vector<int64_t> plan;  // rows (G), starts (G + 1), order (N)
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < N; ++i)
    if (i == 0 || ids[order[i]] != ids[order[i - 1]]) {
      plan.push_back(ids[order[i]]);
      starts.push_back(i);
    }
  const int64_t groups = static_cast<int64_t>(plan.size());
  starts.push_back(N);
  plan.insert(plan.end(), starts.begin(), starts.end());
  plan.insert(plan.end(), order.begin(), order.end());
  const Tensor table = Tensor::empty({static_cast<int64_t>(plan.size())}, DataType::kI64, device());
  copy_from_host(table, plan.data());
  const auto* base = static_cast<const int64_t*>(table.data_ptr());
  gpu::DeviceGuard on(ordinal());
  cuda::embedding_backward(dweight.dtype(), dweight.data_ptr(), dy.data_ptr(), C, base,
                           base + groups, base + 2 * groups + 1, groups, stream().native);
}

// ---- optimizers ---------------------------------------------------------------------------------

// ---- a mixture of experts' routing --------------------------------------------------------------

void CudaBackend::scale_rows(const Tensor& out, const Tensor& x, const Tensor& s) {
  check_float(x, "scale_rows");
  const int64_t M = s.numel(), C = M == 0 ? 0 : x.numel() / M;
  gpu::DeviceGuard on(ordinal());
  cuda::scale_rows(x.dtype(), out.data_ptr(), x.data_ptr(), s.data_ptr(), M, C, stream().native);
}

void CudaBackend::scale_rows_backward(const Tensor& dx, const Tensor& ds, const Tensor& x,
                                      const Tensor& s, const Tensor& dy) {
  check_float(dy, "scale_rows backward");
  const int64_t M = s.numel(), C = M == 0 ? 0 : x.numel() / M;
  gpu::DeviceGuard on(ordinal());
  cuda::scale_rows_backward(dy.dtype(), ptr(dx), ptr(ds), x.data_ptr(), s.data_ptr(), dy.data_ptr(),
                            M, C, stream().native);
}

void CudaBackend::logsumexp_forward(const Tensor& out, const Tensor& x) {
  check_float(x, "logsumexp");
  const int64_t N = out.numel(), V = N == 0 ? 0 : x.numel() / N;
  gpu::DeviceGuard on(ordinal());
  cuda::logsumexp_forward(x.dtype(), out.data_ptr(), x.data_ptr(), N, V, stream().native);
}

void CudaBackend::logsumexp_backward(const Tensor& dx, const Tensor& x, const Tensor& out,
                                     const Tensor& dy) {
  check_float(x, "logsumexp backward");
  const int64_t N = out.numel(), V = N == 0 ? 0 : x.numel() / N;
  gpu::DeviceGuard on(ordinal());
  cuda::logsumexp_backward(x.dtype(), dx.data_ptr(), x.data_ptr(), out.data_ptr(), dy.data_ptr(), N,
                           V, stream().native);
}

// SGD as the CPU runs it (cpu/backend.cc): d = grad + weight_decay * param; buf = momentum * buf
// + d; param -= lr * buf (or lr * d without momentum).
void CudaBackend::sgd(const Tensor& param, const Tensor& grad, const Tensor& buf, double lr,
                      double momentum, double weight_decay) {
  check_float(param, "sgd");
  const DataType dt = param.dtype();
  const int64_t n = param.numel();
  Tensor d = grad;
  if (weight_decay != 0) {
    d = Tensor::empty(grad.shape(), dt, device());
    copy(d, grad, false);
  }
  gpu::DeviceGuard on(ordinal());
  void* s = stream().native;
  if (weight_decay != 0) cuda::axpy(dt, d.data_ptr(), weight_decay, param.data_ptr(), n, s);
  if (buf.defined()) {
    cuda::scale(dt, buf.data_ptr(), buf.data_ptr(), momentum, n, s);
    cuda::binary(cuda::Binary::kAdd, dt, buf.data_ptr(), buf.data_ptr(), d.data_ptr(), n, s);
    cuda::axpy(dt, param.data_ptr(), -lr, buf.data_ptr(), n, s);
  } else {
    cuda::axpy(dt, param.data_ptr(), -lr, d.data_ptr(), n, s);
  }
}

void CudaBackend::adamw(std::span<const AdamWTensors> params, const AdamWHyper& h) {
  for (const AdamWTensors& p : params) check_float(p.param, "adamw");
  const cuda::AdamWScalars s{h.lr, h.beta1, h.beta2, h.beta1_correction, h.beta2_correction, h.eps};
  for (DataType dt : {DataType::kF32, DataType::kF64}) {
    std::vector<cuda::AdamWParam> list;
    for (const AdamWTensors& p : params)
      if (p.param.dtype() == dt)
        list.push_back({p.param.data_ptr(), p.grad.data_ptr(), p.m.data_ptr(), p.v.data_ptr(),
                        p.param.numel(), p.weight_decay});
    if (list.empty()) continue;
    gpu::DeviceGuard on(ordinal());
    cuda::adamw(dt, list.data(), list.size(), s, stream().native);
  }
}

}  // namespace chorus::tensor
