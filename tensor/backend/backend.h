// Internal: the device seam. A Backend is what one device gives the engine: its memory and the
// kernels the ops run on it.
//
// An op (ops/<name>.cc) checks its arguments, puts every input on one device (else
// InvalidArgument naming the op and both devices), allocates its outputs there, and hands the
// arithmetic to backend_for(device); then it records its backward, which does the same. So an op
// file has no per-device code, and a device plugs in kernel by kernel:
//
//   cpu/backend.{h,cc}    CpuBackend, the reference: every kernel (the raw loops are in cpu/).
//   device/               DeviceBackend, any GPU runtime chorus/gpu/runtime.h covers: memory,
//                         host transfers, copies; kernels it lacks throw (see missing()).
//   cuda/                 CudaBackend: DeviceBackend plus the CUDA kernels and cuBLASLt GEMMs.
//
// A kernel's tensors are already checked by its op: one device (this backend's), dtypes as the
// kernel states, shapes consistent. "dense" means contiguous. Unless a kernel says otherwise,
// float kernels take f32 or f64 with every float operand of one dtype, index operands i32 or i64,
// and backward kernels ACCUMULATE (+=) into their d* outputs (autograd.h's rule); undefined d*
// tensors are skipped. Kernels run in the order they are called, on the device's one compute
// stream for a GPU: nothing waits for the device until the host reads (copy_to_host, a value
// returned to the host) or synchronize().
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "chorus/tensor/random.h"
#include "chorus/tensor/storage.h"
#include "chorus/tensor/tensor.h"
#include "optim/square_units.h"

namespace chorus::tensor {

// `batch` GEMMs at fixed element strides between them (row-major, gemm.h's convention):
//   c_i (m x n, row stride ldc) = op(a_i) op(b_i) [+ c_i when accumulate],
//   x_i = the element stride_x * i after x's first element.
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  Tensor a;
  int64_t lda = 0, stride_a = 0;
  Tensor b;
  int64_t ldb = 0, stride_b = 0;
  Tensor c;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  bool accumulate = false;
};

// One parameter of an AdamW step: all four dense, one shape and dtype.
struct AdamWTensors {
  Tensor param, grad, m, v;
  float weight_decay = 0;  // 0 for parameters that do not decay
};
struct AdamWHyper {
  float lr = 0, beta1 = 0, beta2 = 0;
  float beta1_correction = 1, beta2_correction = 1;  // 1 - beta^t
  float eps = 0;
};

class Backend {
 public:
  explicit Backend(Device device) : device_(device) {}
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  Device device() const { return device_; }

  // ---- memory -----------------------------------------------------------------------------------
  // Uninitialised bytes (bytes may be 0); std::bad_alloc or chorus::Error when there are none.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) noexcept = 0;
  virtual MemoryStats memory_stats() = 0;
  virtual void empty_cache() = 0;
  virtual void reset_peak_memory() = 0;
  // Returns once every kernel and copy queued on this device has finished.
  virtual void synchronize() {}
  // The stream the device's kernels and copies run on (the default stream for the CPU).
  virtual gpu::Stream compute_stream() const { return {}; }

  // ---- transfers (GPU backends; the CPU is the host) --------------------------------------------
  // dst (dense, on this device) = the dst.nbytes() bytes at `host`; returns when `host` may be
  // reused.
  virtual void copy_from_host(const Tensor& dst, const void* host);
  // The src.nbytes() bytes of src (dense, on this device) into `host`, when it returns.
  virtual void copy_to_host(void* host, const Tensor& src);
  // dst (dense, on this device) = src (dense, same dtype, another device of this kind).
  virtual void copy_from_peer(const Tensor& dst, const Tensor& src);

  // ---- copies and fills -------------------------------------------------------------------------
  // dst (+)= src: one shape, any strides, any dtypes (converted as cpu/strided.cc does).
  virtual void copy(const Tensor& dst, const Tensor& src, bool accumulate);
  // Every element of t (any strides, any dtype) = value.
  virtual void fill(const Tensor& t, double value);
  // t (dense, any dtype) = 0 bytes.
  virtual void zero(const Tensor& t);

  // ---- element-wise, dense, one shape -----------------------------------------------------------
  virtual void add(const Tensor& out, const Tensor& a, const Tensor& b);  // a + b
  virtual void sub(const Tensor& out, const Tensor& a, const Tensor& b);  // a - b
  virtual void mul(const Tensor& out, const Tensor& a, const Tensor& b);  // a * b
  // da += b * dy, db += a * dy.
  virtual void mul_backward(const Tensor& da, const Tensor& db, const Tensor& a, const Tensor& b,
                            const Tensor& dy);
  virtual void scale(const Tensor& out, const Tensor& a, double s);   // s * a; out may be a
  virtual void axpy(const Tensor& y, double alpha, const Tensor& x);  // y += alpha x
  virtual void gelu_forward(const Tensor& out, const Tensor& x);      // tanh approximation
  virtual void gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dy);
  // out (N, C) = x (N, C) + bias (C) on every row; out may be x.
  virtual void add_bias(const Tensor& out, const Tensor& x, const Tensor& bias);
  // dbias (C) (+)= column sums of dy (N, C); assigned when `assign`.
  virtual void sum_rows(const Tensor& dbias, const Tensor& dy, bool assign);
  // out (+)= keep(i) ? x / (1 - p) : 0, keep(i) = uniform_at(key, i) >= p (ops.h: dropout).
  virtual void dropout(const Tensor& out, const Tensor& x, double p, RngKey key, bool accumulate);

  // ---- reductions -------------------------------------------------------------------------------
  // out (a one-element tensor) = factor * sum(x), summed in double.
  virtual void sum(const Tensor& out, const Tensor& x, double factor);
  // dx += factor * dy[0] on every element (dy a one-element tensor).
  virtual void add_scalar(const Tensor& dx, const Tensor& dy, double factor);
  // The sum of the squares of every element of every tensor (dense, f32/f64), in double, on the
  // host: a gradient norm's square, or infinite / NaN when some element is.
  virtual double sum_squares(std::span<const Tensor> tensors);
  // The exact gradient norm's passes (optim/square_units.h), on the host, for dense f32 and f64
  // (and, on the CPU, bf16 and f16) tensors: the largest |x| (+inf when an element is NaN or
  // infinite), and the sum of x's squares on the grid 2^scale_exponent in units. Bit-exact on
  // every device: the grid is one definition and integer sums have no order.
  virtual float max_abs(const Tensor& x);
  virtual optim::U128 square_units(const Tensor& x, int scale_exponent);

  // ---- matrix products --------------------------------------------------------------------------
  // a, b, c of one float dtype; the backend's f32 or f64 GEMM.
  virtual void gemm(const GemmArgs& args);
  // The operand of an autocast GEMM: x (f32) rounded to `lowp` (bf16 or f16), dense, in the
  // representation gemm_autocast() reads (the CPU may keep it as f32 holding rounded values).
  virtual Tensor autocast_operand(const Tensor& x, DataType lowp);
  // a, b from autocast_operand(.., lowp), c f32: products of the 16-bit operands accumulated in
  // f32, each result rounded to `lowp` before it is stored or added (as a 16-bit GEMM's output).
  virtual void gemm_autocast(DataType lowp, const GemmArgs& args);

  // ---- GPT layers -------------------------------------------------------------------------------
  // q, k, v, out: (B, NH, T, HS) with stride(3) == 1, any other strides; att (B, NH, T, T)
  // dense. ops.h: causal_attention. att gets the softmax weights (zeros above the diagonal).
  virtual void attention_forward(const Tensor& out, const Tensor& att, const Tensor& q,
                                 const Tensor& k, const Tensor& v);
  // dq, dk, dv (views like q, all three defined) += (or = when `assign`) the gradients.
  virtual void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, bool assign,
                                  const Tensor& dy, const Tensor& att, const Tensor& q,
                                  const Tensor& k, const Tensor& v);
  // The fused form of the two above (flash attention: nothing T x T is stored), where a backend
  // has it: has_fused_attention says whether it takes this dtype and head size (false by
  // default; ops/attention.cc then uses the two above). Same operands; lse (B, NH, T) dense gets
  // the logsumexp of each row's scaled scores, which backward takes with out to recompute the
  // weights (out and lse as forward left them).
  virtual bool has_fused_attention(DataType dtype, int64_t head_size) const;
  virtual void fused_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q,
                                       const Tensor& k, const Tensor& v);
  virtual void fused_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                        bool assign, const Tensor& dy, const Tensor& out,
                                        const Tensor& lse, const Tensor& q, const Tensor& k,
                                        const Tensor& v);
  // x, out (N, C); weight, bias (C); mean, rstd (N) out.
  virtual void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 double eps);
  virtual void layernorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                  const Tensor& dy, const Tensor& x, const Tensor& weight,
                                  const Tensor& mean, const Tensor& rstd);
  // Over the last dim of (N, V).
  virtual void softmax_forward(const Tensor& y, const Tensor& x);
  virtual void softmax_backward(const Tensor& dx, const Tensor& y, const Tensor& dy);
  // The cross-entropy pieces (ops/cross_entropy.cc): logits (N, V), targets (N) index dtype,
  // row_max (N), sums (N, 2): [sum_v exp(logit - max), logit of the target in this shard or 0].
  virtual void row_max(const Tensor& row_max, const Tensor& logits);
  virtual void exp_sums_and_target(const Tensor& sums, const Tensor& logits, const Tensor& row_max,
                                   const Tensor& targets, int64_t vocab_start);
  // loss () = mean over n of log sums[n, 0] + row_max[n] - sums[n, 1], summed in double.
  virtual void cross_entropy_loss(const Tensor& loss, const Tensor& sums, const Tensor& row_max);
  // dlogits += (softmax - onehot(target - vocab_start)) * dloss[0] / N.
  virtual void cross_entropy_backward(const Tensor& dlogits, const Tensor& logits,
                                      const Tensor& row_max, const Tensor& sums,
                                      const Tensor& targets, int64_t vocab_start,
                                      const Tensor& dloss);
  // out (N, C) = weight (V, C) rows at idx (N); InvalidArgument for an index outside [0, V).
  virtual void embedding_forward(const Tensor& out, const Tensor& idx, const Tensor& weight);
  // dweight (V, C) rows at idx += dy (N, C) rows (repeated indices add up).
  virtual void embedding_backward(const Tensor& dweight, const Tensor& idx, const Tensor& dy);
  // The routing pieces of a mixture of experts (ops/scale_rows.cc, ops/logsumexp.cc):
  // out (M, C) = x (M, C) with row m times s[m] (s (M)); out may be x.
  virtual void scale_rows(const Tensor& out, const Tensor& x, const Tensor& s);
  // dx += dy * s per row; ds[m] += sum_c dy[m, c] x[m, c] (summed in double, c in order).
  virtual void scale_rows_backward(const Tensor& dx, const Tensor& ds, const Tensor& x,
                                   const Tensor& s, const Tensor& dy);
  // out (N) = log sum_v exp(x[n, v]) over the last dim of x (N, V), in double.
  virtual void logsumexp_forward(const Tensor& out, const Tensor& x);
  // dx[n, v] += exp(x[n, v] - out[n]) * dy[n].
  virtual void logsumexp_backward(const Tensor& dx, const Tensor& x, const Tensor& out,
                                  const Tensor& dy);

  // ---- optimizers -------------------------------------------------------------------------------
  // One AdamW update of every listed parameter (llm.c's kernel; decoupled weight decay). The
  // element-wise arithmetic is fixed, so a shard's update equals the whole tensor's.
  virtual void adamw(std::span<const AdamWTensors> params, const AdamWHyper& hyper);
  // SGD: d = grad + weight_decay * param; buf = momentum * buf + d (buf undefined when momentum is
  // 0: d itself); param -= lr * buf.
  virtual void sgd(const Tensor& param, const Tensor& grad, const Tensor& buf, double lr,
                   double momentum, double weight_decay);

 protected:
  // Throws InvalidArgument: `kernel` has no implementation on this device (the defaults above).
  [[noreturn]] void missing(const char* kernel) const;

 private:
  Device device_;
};

Backend& cpu_backend();                  // cpu/backend.cc
Backend& device_backend(Device device);  // backend/registry.cc

// The backend of `device`: the CPU's, or the GPU device's (created on first use). Throws
// InvalidArgument with device_unavailable_reason() for a device this process cannot use.
inline Backend& backend_for(Device device) {
  return device.is_cpu() ? cpu_backend() : device_backend(device);
}

// Allocation poisoning, for tests and debugging: while on, every backend fills each new
// allocation with 0xFF bytes (NaN in every float dtype) before handing it out, so a kernel that
// leaves part of its output unwritten shows NaN instead of a plausible stale value.
// CHORUS_TENSOR_POISON=1 turns it on for a process.
bool poison_allocations();
void set_poison_allocations(bool on);

}  // namespace chorus::tensor
