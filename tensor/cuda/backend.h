// Internal: the CUDA backend: DeviceBackend (memory, stream, transfers) plus the CUDA kernels of
// cuda/*.cu and cuBLASLt GEMMs (cuda/cublaslt.h). Each kernel checks what it takes, makes the
// device current, and queues its work on the device's compute stream; scratch memory comes from
// the device's caching allocator in stream order. Compiled only in a CUDA build
// (tensor/CMakeLists.txt).
#pragma once

#include <memory>
#include <mutex>

#include "cuda/cublaslt.h"
#include "device/device_backend.h"

namespace chorus::tensor {

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(Device device);
  ~CudaBackend() override;

  void copy(const Tensor& dst, const Tensor& src, bool accumulate) override;
  void fill(const Tensor& t, double value) override;

  void add(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void sub(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void mul(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void mul_backward(const Tensor& da, const Tensor& db, const Tensor& a, const Tensor& b,
                    const Tensor& dy) override;
  void scale(const Tensor& out, const Tensor& a, double s) override;
  void axpy(const Tensor& y, double alpha, const Tensor& x) override;
  void gelu_forward(const Tensor& out, const Tensor& x) override;
  void gelu_backward(const Tensor& dx, const Tensor& x, const Tensor& dy) override;
  void add_bias(const Tensor& out, const Tensor& x, const Tensor& bias) override;
  void sum_rows(const Tensor& dbias, const Tensor& dy, bool assign) override;
  void dropout(const Tensor& out, const Tensor& x, double p, RngKey key, bool accumulate) override;

  void sum(const Tensor& out, const Tensor& x, double factor) override;
  void add_scalar(const Tensor& dx, const Tensor& dy, double factor) override;
  double sum_squares(std::span<const Tensor> tensors) override;
  float max_abs(const Tensor& x) override;
  optim::U128 square_units(const Tensor& x, int scale_exponent) override;

  void gemm(const GemmArgs& args) override;
  Tensor autocast_operand(const Tensor& x, DataType lowp) override;
  void gemm_autocast(DataType lowp, const GemmArgs& args) override;

  void attention_forward(const Tensor& out, const Tensor& att, const Tensor& q, const Tensor& k,
                         const Tensor& v) override;
  void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, bool assign,
                          const Tensor& dy, const Tensor& att, const Tensor& q, const Tensor& k,
                          const Tensor& v) override;
  bool has_fused_attention(DataType dtype, int64_t head_size) const override;
  void fused_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q,
                               const Tensor& k, const Tensor& v) override;
  void fused_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, bool assign,
                                const Tensor& dy, const Tensor& out, const Tensor& lse,
                                const Tensor& q, const Tensor& k, const Tensor& v) override;
  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                         const Tensor& weight, const Tensor& bias, double eps) override;
  void layernorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                          const Tensor& dy, const Tensor& x, const Tensor& weight,
                          const Tensor& mean, const Tensor& rstd) override;
  void softmax_forward(const Tensor& y, const Tensor& x) override;
  void softmax_backward(const Tensor& dx, const Tensor& y, const Tensor& dy) override;
  void row_max(const Tensor& row_max, const Tensor& logits) override;
  void exp_sums_and_target(const Tensor& sums, const Tensor& logits, const Tensor& row_max,
                           const Tensor& targets, int64_t vocab_start) override;
  void cross_entropy_loss(const Tensor& loss, const Tensor& sums, const Tensor& row_max) override;
  void cross_entropy_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& row_max,
                              const Tensor& sums, const Tensor& targets, int64_t vocab_start,
                              const Tensor& dloss) override;
  void embedding_forward(const Tensor& out, const Tensor& idx, const Tensor& weight) override;
  void embedding_backward(const Tensor& dweight, const Tensor& idx, const Tensor& dy) override;

  void scale_rows(const Tensor& out, const Tensor& x, const Tensor& s) override;
  void scale_rows_backward(const Tensor& dx, const Tensor& ds, const Tensor& x, const Tensor& s,
                           const Tensor& dy) override;
  void logsumexp_forward(const Tensor& out, const Tensor& x) override;
  void logsumexp_backward(const Tensor& dx, const Tensor& x, const Tensor& out,
                          const Tensor& dy) override;
  void sgd(const Tensor& param, const Tensor& grad, const Tensor& buf, double lr, double momentum,
           double weight_decay) override;
  void adamw(std::span<const AdamWTensors> params, const AdamWHyper& hyper) override;

 private:
  // Dense device bytes for one call's scratch, freed (back to the cache) when the tensor goes:
  // later work on the stream may reuse them only after this call's kernels.
  Tensor scratch(size_t bytes);
  // A product through cuBLASLt (made, with its workspace, on first use).
  void lt(cuda::LtMatmul mm);

  std::once_flag lt_once_;
  std::unique_ptr<cuda::CublasLt> lt_;
  Tensor workspace_;
};

}  // namespace chorus::tensor
