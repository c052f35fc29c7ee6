// The Backend base (backend/backend.h): every kernel a backend does not override says so.
#include "backend/backend.h"

namespace chorus::tensor {

void Backend::missing(const char* kernel) const {
  throw InvalidArgument(detail::concat(
      kernel, " is not implemented on ", to_string(device_),
      ": this build's backend for the device lacks the kernel (the CPU has every one; move the "
      "tensors with to(\"cpu\"))"));
}

void Backend::copy_from_host(const Tensor&, const void*) { missing("copy_from_host"); }
void Backend::copy_to_host(void*, const Tensor&) { missing("copy_to_host"); }
void Backend::copy_from_peer(const Tensor&, const Tensor&) { missing("copy_from_peer"); }
void Backend::copy(const Tensor&, const Tensor&, bool) { missing("copy"); }
void Backend::fill(const Tensor&, double) { missing("fill"); }
void Backend::zero(const Tensor&) { missing("zero"); }
void Backend::add(const Tensor&, const Tensor&, const Tensor&) { missing("add"); }
void Backend::sub(const Tensor&, const Tensor&, const Tensor&) { missing("sub"); }
void Backend::mul(const Tensor&, const Tensor&, const Tensor&) { missing("mul"); }
void Backend::mul_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&) {
  missing("mul_backward");
}
void Backend::scale(const Tensor&, const Tensor&, double) { missing("scale"); }
void Backend::axpy(const Tensor&, double, const Tensor&) { missing("axpy"); }
void Backend::gelu_forward(const Tensor&, const Tensor&) { missing("gelu_forward"); }
void Backend::gelu_backward(const Tensor&, const Tensor&, const Tensor&) {
  missing("gelu_backward");
}
void Backend::add_bias(const Tensor&, const Tensor&, const Tensor&) { missing("add_bias"); }
void Backend::sum_rows(const Tensor&, const Tensor&, bool) { missing("sum_rows"); }
void Backend::dropout(const Tensor&, const Tensor&, double, RngKey, bool) { missing("dropout"); }
void Backend::sum(const Tensor&, const Tensor&, double) { missing("sum"); }
void Backend::add_scalar(const Tensor&, const Tensor&, double) { missing("add_scalar"); }
double Backend::sum_squares(std::span<const Tensor>) { missing("sum_squares"); }
float Backend::max_abs(const Tensor&) { missing("max_abs"); }
optim::U128 Backend::square_units(const Tensor&, int) { missing("square_units"); }
void Backend::gemm(const GemmArgs&) { missing("gemm"); }
Tensor Backend::autocast_operand(const Tensor&, DataType) { missing("autocast_operand"); }
void Backend::gemm_autocast(DataType, const GemmArgs&) { missing("gemm_autocast"); }
void Backend::attention_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                const Tensor&) {
  missing("attention_forward");
}
void Backend::attention_backward(const Tensor&, const Tensor&, const Tensor&, bool, const Tensor&,
                                 const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  missing("attention_backward");
}
bool Backend::has_fused_attention(DataType, int64_t) const { return false; }
void Backend::fused_attention_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&) {
  missing("fused_attention_forward");
}
void Backend::fused_attention_backward(const Tensor&, const Tensor&, const Tensor&, bool,
                                       const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&) {
  missing("fused_attention_backward");
}
void Backend::layernorm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                const Tensor&, const Tensor&, double) {
  missing("layernorm_forward");
}
void Backend::layernorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  missing("layernorm_backward");
}
void Backend::scale_rows(const Tensor&, const Tensor&, const Tensor&) { missing("scale_rows"); }
void Backend::scale_rows_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                  const Tensor&) {
  missing("scale_rows_backward");
}
void Backend::logsumexp_forward(const Tensor&, const Tensor&) { missing("logsumexp_forward"); }
void Backend::logsumexp_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  missing("logsumexp_backward");
}
void Backend::softmax_forward(const Tensor&, const Tensor&) { missing("softmax_forward"); }
void Backend::softmax_backward(const Tensor&, const Tensor&, const Tensor&) {
  missing("softmax_backward");
}
void Backend::row_max(const Tensor&, const Tensor&) { missing("row_max"); }
void Backend::exp_sums_and_target(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                  int64_t) {
  missing("exp_sums_and_target");
}
void Backend::cross_entropy_loss(const Tensor&, const Tensor&, const Tensor&) {
  missing("cross_entropy_loss");
}
void Backend::cross_entropy_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, int64_t, const Tensor&) {
  missing("cross_entropy_backward");
}
void Backend::embedding_forward(const Tensor&, const Tensor&, const Tensor&) {
  missing("embedding_forward");
}
void Backend::embedding_backward(const Tensor&, const Tensor&, const Tensor&) {
  missing("embedding_backward");
}
void Backend::adamw(std::span<const AdamWTensors>, const AdamWHyper&) { missing("adamw"); }
void Backend::sgd(const Tensor&, const Tensor&, const Tensor&, double, double, double) {
  missing("sgd");
}

}  // namespace chorus::tensor
