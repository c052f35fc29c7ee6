#include "chorus/error.h"
#include "chorus/tensor/amp.h"

namespace chorus::tensor {
namespace {
thread_local DataType t_autocast = DataType::kF32;
}

DataType autocast_dtype() { return t_autocast; }

AutocastGuard::AutocastGuard(DataType dtype) : prev_(t_autocast) {
  CHORUS_ARG_CHECK(dtype == DataType::kBF16 || dtype == DataType::kF16 || dtype == DataType::kF32,
                   "autocast to ", to_string(dtype), ": expected bf16, f16 or f32");
  t_autocast = dtype;
}
AutocastGuard::~AutocastGuard() { t_autocast = prev_; }

}  // namespace chorus::tensor
