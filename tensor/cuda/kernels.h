// Internal: the CUDA kernels of the tensor backend, as plain C++ launches (cuda/*.cu implement
// them; cuda/backend.cc calls them). Pointers are device addresses of dense arrays unless a
// layout says otherwise; every launch is asynchronous on `stream` (a cudaStream_t) with the
// device current, and throws gpu::GpuError when the launch fails. Shapes and semantics are those
// of the Backend kernels they serve (backend/backend.h): backward kernels accumulate (+=), and
// float kernels take f32 or f64 (InvalidArgument otherwise). None uses atomics: every sum runs in
// an order fixed by the shapes alone, so a kernel repeated on the same inputs gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chorus/types.h"

namespace chorus::tensor::cuda {

using Stream = void*;

// ---- element-wise (elementwise.cu)
// ---------------------------------------------------------------
enum class Binary : uint8_t { kAdd, kSub, kMul };
void binary(Binary op, DataType dt, void* out, const void* a, const void* b, int64_t n,
            Stream stream);
void scale(DataType dt, void* out, const void* a, double s, int64_t n, Stream stream);
void axpy(DataType dt, void* y, double alpha, const void* x, int64_t n, Stream stream);
void mul_backward(DataType dt, void* da, void* db, const void* a, const void* b, const void* dy,
                  int64_t n, Stream stream);  // da / db may be null
void gelu_forward(DataType dt, void* out, const void* x, int64_t n, Stream stream);
void gelu_backward(DataType dt, void* dx, const void* x, const void* dy, int64_t n, Stream stream);
// out (N, C) = x + bias on every row (out may be x).
void add_bias(DataType dt, void* out, const void* x, const void* bias, int64_t N, int64_t C,
              Stream stream);
// dx[i] += factor * dy[0].
void add_scalar(DataType dt, void* dx, const void* dy, double factor, int64_t n, Stream stream);
// out[i] (+)= keep(i) ? x[i] / (1 - p) : 0, keep(i) = the uniform of (seed, stream_id, i) >= p
// (dropout.cu; the CPU's mask).
void dropout(DataType dt, void* out, const void* x, int64_t n, double p, uint64_t seed,
             uint64_t stream_id, bool accumulate, Stream stream);
// out (+)= in rounded to bf16 / f16, as f32 (out may be in).
void round_to(DataType lowp, float* out, const float* in, int64_t n, bool accumulate,
              Stream stream);

// ---- copies and fills (copy.cu) -----------------------------------------------------------------
constexpr int kMaxDims = 8;
// One shape and each side's element strides; dims of size 1 and dims that merge are the
// caller's to drop (fewer dims, faster index math).
struct Layout {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t dst[kMaxDims] = {};
  int64_t src[kMaxDims] = {};
};
// Whether strided_copy converts between these dtypes: any two of f32, f64, bf16, f16, and an
// integer dtype to itself.
bool can_copy(DataType dst, DataType src);
// dst (+)= src over the layout, converting as the CPU does (cpu/strided.cc).
void strided_copy(DataType dst_dt, void* dst, DataType src_dt, const void* src,
                  const Layout& layout, bool accumulate, Stream stream);
// Every element of dst (layout.dst strides) = value.
void fill(DataType dt, void* dst, const Layout& layout, double value, Stream stream);

// ---- reductions (reduce.cu) ---------------------------------------------------------------------
// Each takes device scratch of the size its *_scratch_bytes function gives.
size_t sum_scratch_bytes();
// out[0] = factor * sum of x (summed in double, stored as dt).
void sum(DataType dt, void* out, const void* x, int64_t n, double factor, void* scratch,
         Stream stream);
// *result (a device double) = sum over the inputs of the squares of their elements, in double.
struct SquaresInput {
  const void* data;
  DataType dtype;  // f32 or f64
  int64_t n;
};
size_t sum_squares_scratch_bytes(size_t count);
void sum_squares(const SquaresInput* inputs, size_t count, double* result, void* scratch,
                 Stream stream);
// The exact gradient norm's passes (square_units.cu; optim/square_units.h), for f32, f64, bf16
// and f16, with device scratch of norm_scratch_bytes():
//   *result (a device float) = the largest |x|, +inf when an element is NaN or infinite;
//   result[0..3] (device) = the sums of the 32-bit limbs of x's squares on the grid of `scale`
//   (n below 2^32, so that no limb sum overflows).
size_t norm_scratch_bytes();
void max_abs(DataType dt, const void* x, int64_t n, float* result, void* scratch, Stream stream);
void square_limbs(DataType dt, const void* x, int64_t n, double scale, uint64_t* result,
                  void* scratch, Stream stream);
// A mixture of experts' routing (routing.cu; the Backend kernels of the same names):
//   scale_rows: out (M, C) = x with row m times s[m] (out may be x);
//   scale_rows_backward: dx += dy * s per row, ds[m] += sum_c dy x (in double); either may be null;
//   logsumexp_forward: out (N) = log sum_v exp(x[n, v]) (in double);
//   logsumexp_backward: dx[n, v] += exp(x[n, v] - out[n]) dy[n].
void scale_rows(DataType dt, void* out, const void* x, const void* s, int64_t M, int64_t C,
                Stream stream);
void scale_rows_backward(DataType dt, void* dx, void* ds, const void* x, const void* s,
                         const void* dy, int64_t M, int64_t C, Stream stream);
void logsumexp_forward(DataType dt, void* out, const void* x, int64_t N, int64_t V, Stream stream);
void logsumexp_backward(DataType dt, void* dx, const void* x, const void* out, const void* dy,
                        int64_t N, int64_t V, Stream stream);
// out (C) (+)= column sums of in (N, C) [assigned when `assign`].
size_t column_sums_scratch_bytes(DataType dt, int64_t N, int64_t C);
void column_sums(DataType dt, void* out, const void* in, int64_t N, int64_t C, bool assign,
                 void* scratch, Stream stream);

// ---- layernorm (layernorm.cu) -------------------------------------------------------------------
void layernorm_forward(DataType dt, void* out, void* mean, void* rstd, const void* x,
                       const void* weight, const void* bias, int64_t N, int64_t C, double eps,
                       Stream stream);
// dx, dweight, dbias may be null; scratch: layernorm_scratch_bytes(dt, N, C).
size_t layernorm_scratch_bytes(DataType dt, int64_t N, int64_t C);
void layernorm_backward(DataType dt, void* dx, void* dweight, void* dbias, const void* dy,
                        const void* x, const void* weight, const void* mean, const void* rstd,
                        int64_t N, int64_t C, void* scratch, Stream stream);

// ---- softmax (softmax.cu) -----------------------------------------------------------------------
void softmax_forward(DataType dt, void* y, const void* x, int64_t N, int64_t V, Stream stream);
void softmax_backward(DataType dt, void* dx, const void* y, const void* dy, int64_t N, int64_t V,
                      Stream stream);
// att (rows, T, T), in place: row t of each square keeps columns s <= t, softmaxed, zeros after.
void causal_softmax(DataType dt, void* att, int64_t squares, int64_t T, Stream stream);
// dp (rows, T, T), in place: dp = p * (dp - rowsum(p * dp)) * scale.
void softmax_grad(DataType dt, void* dp, const void* p, int64_t squares, int64_t T, double scale,
                  Stream stream);

// ---- fused causal attention (flash_attention.cu; tiles: flash.h) -------------------------------
// FlashAttention-2's schedule: a block takes a tile of query rows through the key tiles the
// causal mask leaves with an online softmax; nothing (B, NH, T, T) is stored. Forward writes out
// and lse (B, NH, T) dense, the logsumexp of each row's scaled scores; backward recomputes the
// weights tile by tile from q, k and lse: dk and dv per key tile (one block looping over query
// tiles), dq per query tile (one block looping over key tiles), so no sum needs atomics.
// A (B, NH, T, HS) operand: its first element and the element strides of dims 0-2 (dim 3 dense).
struct HeadsOperand {
  void* data;
  int64_t s0, s1, s2;
};
struct HeadsShape {
  int64_t B, NH, T, HS;
};
// Whether the fused kernels take dtype dt (f32, f64) and head size HS on device `ordinal`: HS in
// [1, flash::kMaxHeadSize] and their shared memory within the device's limit per block.
bool flash_attention_supported(DataType dt, int64_t HS, int ordinal);
void flash_attention_forward(DataType dt, HeadsOperand out, void* lse, HeadsOperand q,
                             HeadsOperand k, HeadsOperand v, const HeadsShape& shape, double scale,
                             Stream stream);
// dq, dk, dv (+)= the gradients [assigned when `assign`]; scratch: flash_attention_scratch_bytes.
size_t flash_attention_scratch_bytes(DataType dt, const HeadsShape& shape);
void flash_attention_backward(DataType dt, HeadsOperand dq, HeadsOperand dk, HeadsOperand dv,
                              bool assign, HeadsOperand dy, HeadsOperand out, const void* lse,
                              HeadsOperand q, HeadsOperand k, HeadsOperand v,
                              const HeadsShape& shape, double scale, void* scratch, Stream stream);

// ---- cross-entropy (cross_entropy.cu) -----------------------------------------------------------
void row_max(DataType dt, void* row_max, const void* logits, int64_t N, int64_t V, Stream stream);
void exp_sums_and_target(DataType dt, DataType idt, void* sums, const void* logits,
                         const void* row_max, const void* targets, int64_t vocab_start, int64_t N,
                         int64_t V, Stream stream);
void cross_entropy_loss(DataType dt, void* loss, const void* sums, const void* row_max, int64_t N,
                        Stream stream);
void cross_entropy_backward(DataType dt, DataType idt, void* dlogits, const void* logits,
                            const void* row_max, const void* sums, const void* targets,
                            int64_t vocab_start, int64_t N, int64_t V, const void* dloss,
                            Stream stream);

// ---- embedding (embedding.cu) -------------------------------------------------------------------
// range[0] = min, range[1] = max of idx (device int64 pair); n > 0.
void index_range(DataType idt, const void* idx, int64_t n, int64_t* range, Stream stream);
// out row n = weight row idx[n], row_bytes each.
void embedding_forward(DataType idt, void* out, const void* idx, const void* weight, int64_t N,
                       size_t row_bytes, Stream stream);
// The rows of dy grouped by the weight row they go to (built on the host from the indices):
// group g adds dy rows order[starts[g] .. starts[g + 1]) into weight row rows[g], in that order.
void embedding_backward(DataType dt, void* dweight, const void* dy, int64_t C, const int64_t* rows,
                        const int64_t* starts, const int64_t* order, int64_t groups, Stream stream);

// ---- AdamW (adamw.cu) ---------------------------------------------------------------------------
struct AdamWParam {
  void* param;
  const void* grad;
  void* m;
  void* v;
  int64_t n;
  float weight_decay;
};
struct AdamWScalars {
  float lr, beta1, beta2, beta1_correction, beta2_correction, eps;
};
// One fused update of every listed parameter (launches cover up to 48 parameters each).
void adamw(DataType dt, const AdamWParam* params, size_t count, const AdamWScalars& s,
           Stream stream);

}  // namespace chorus::tensor::cuda
