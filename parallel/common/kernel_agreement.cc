#include "common/kernel_agreement.h"

#include <string>

#include "chorus/log.h"
#include "chorus/tensor/gemm.h"

namespace chorus::parallel {
namespace {

std::string broadcast_string(Communicator& group, std::string s, int root) {
  int64_t n = static_cast<int64_t>(s.size());
  group.broadcast(&n, &n, 1, DataType::kI64, root);
  s.resize(static_cast<size_t>(n));
  group.broadcast(s.data(), s.data(), s.size(), DataType::kU8, root);
  return s;
}

}  // namespace

void agree_on_kernels(Communicator& group) {
  if (group.deterministic()) tensor::pin_gemm_choices();
  const bool root = group.rank() == 0;
  const std::string f32 = broadcast_string(group, root ? tensor::gemm_backend() : "", 0);
  const std::string bf16 = broadcast_string(group, root ? tensor::bf16_gemm_mode() : "", 0);
  if (!root) {
    tensor::set_gemm_backend(f32);
    tensor::set_bf16_gemm_mode(bf16);
  }
  CHORUS_INFO(kLogPar, "kernels agreed with rank 0: gemm ", f32, ", bf16 gemm ", bf16,
              group.deterministic() ? " (pinned: deterministic)" : "");
}

}  // namespace chorus::parallel
