#include "ops/op_util.h"

namespace chorus::tensor {

Device one_device(const char* op, std::span<const Placement> placements) {
  if (placements.empty()) return Device::cpu();
  const Placement& first = placements.front();
  for (const Placement& p : placements)
    if (p.device != first.device)
      throw InvalidArgument(detail::concat(
          op, ": ", first.what, " is on ", to_string(first.device), " but ", p.what, " is on ",
          to_string(p.device), " (an op's tensors must be on one device: move them with to())"));
  return first.device;
}

Device same_device(const char* op, std::initializer_list<Operand> operands) {
  Placement placements[8];
  size_t n = 0;
  for (const Operand& o : operands)
    if (o.tensor.defined()) {
      CHORUS_CHECK(n < std::size(placements), "same_device: more than 8 operands");
      placements[n++] = {o.what, o.tensor.device()};
    }
  return one_device(op, std::span<const Placement>(placements, n));
}

void check_float(const Tensor& t, const char* op) {
  const DataType dt = t.dtype();
  CHORUS_ARG_CHECK(dt == DataType::kF32 || dt == DataType::kF64, op, ": dtype ", to_string(dt),
                   " not supported (f32 or f64; cast first)");
}

}  // namespace chorus::tensor
