#include "optim/grad_groups.h"

namespace chorus::tensor::optim {

std::vector<std::vector<Tensor>> gradients_by_device(const std::vector<Tensor>& params,
                                                     const char* op) {
  std::vector<std::vector<Tensor>> groups;
  for (const Tensor& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    CHORUS_ARG_CHECK(g.dtype() == DataType::kF32 || g.dtype() == DataType::kF64, op, ": dtype ",
                     to_string(g.dtype()), " not supported (f32 or f64; cast first)");
    auto it = groups.begin();
    while (it != groups.end() && it->front().device() != g.device()) ++it;
    if (it == groups.end())
      groups.push_back({g});
    else
      it->push_back(g);
  }
  return groups;
}

}  // namespace chorus::tensor::optim
