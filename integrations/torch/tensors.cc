#include "tensors.h"

#include <optional>

#include "chorus/error.h"

namespace chorus::torch {
namespace {

std::optional<DataType> chorus_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return DataType::kF32;
    case at::kDouble:
      return DataType::kF64;
    case at::kHalf:
      return DataType::kF16;
    case at::kBFloat16:
      return DataType::kBF16;
    case at::kChar:
      return DataType::kI8;
    case at::kByte:
      return DataType::kU8;
    case at::kInt:
      return DataType::kI32;
    case at::kLong:
      return DataType::kI64;
    default:
      return std::nullopt;
  }
}

const char* op_name(::c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case ::c10d::ReduceOp::SUM:
      return "SUM";
    case ::c10d::ReduceOp::AVG:
      return "AVG";
    case ::c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case ::c10d::ReduceOp::MIN:
      return "MIN";
    case ::c10d::ReduceOp::MAX:
      return "MAX";
    case ::c10d::ReduceOp::BAND:
      return "BAND";
    case ::c10d::ReduceOp::BOR:
      return "BOR";
    case ::c10d::ReduceOp::BXOR:
      return "BXOR";
    case ::c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNUSED";
  }
}

}  // namespace

Elements movable(const at::Tensor& t) {
  const auto n = static_cast<size_t>(t.numel());
  if (auto d = chorus_type(t.scalar_type())) return {t.data_ptr(), n, *d};
  return {t.data_ptr(), n * t.element_size(), DataType::kU8};
}

Elements reducible(const at::Tensor& t, const std::string& call, ::c10d::ReduceOp::RedOpType op) {
  const auto n = static_cast<size_t>(t.numel());
  if (auto d = chorus_type(t.scalar_type())) return {t.data_ptr(), n, *d};
  if (t.is_complex()) {
    // The real and imaginary parts add independently; products and orderings do not.
    CHORUS_ARG_CHECK(op == ::c10d::ReduceOp::SUM || op == ::c10d::ReduceOp::AVG, call,
                     ": ReduceOp.", op_name(op), " is not defined on complex tensors (",
                     t.scalar_type(), "); SUM and AVG are");
    const at::ScalarType part = c10::toRealValueType(t.scalar_type());
    if (auto d = chorus_type(part)) return {t.data_ptr(), 2 * n, *d};
  }
  throw InvalidArgument(detail::concat(
      call, ": the chorus backend cannot reduce ", t.scalar_type(),
      " tensors (it reduces float32, float64, float16, bfloat16, int8, uint8, int32, int64 and "
      "complex with SUM/AVG)"));
}

ReduceOp reduce_op(const ::c10d::ReduceOp& op, const std::string& call) {
  switch (op.op_) {
    case ::c10d::ReduceOp::SUM:
      return ReduceOp::kSum;
    case ::c10d::ReduceOp::AVG:
      return ReduceOp::kAvg;
    case ::c10d::ReduceOp::PRODUCT:
      return ReduceOp::kProd;
    case ::c10d::ReduceOp::MIN:
      return ReduceOp::kMin;
    case ::c10d::ReduceOp::MAX:
      return ReduceOp::kMax;
    default:
      throw InvalidArgument(detail::concat(call, ": the chorus backend does not support ReduceOp.",
                                           op_name(op.op_),
                                           " (it supports SUM, AVG, PRODUCT, MIN and MAX)"));
  }
}

void check_tensor(const at::Tensor& t, const std::string& call, const char* what) {
  CHORUS_ARG_CHECK(t.defined(), call, ": ", what, " is an undefined tensor");
  CHORUS_ARG_CHECK(t.device().is_cpu(), call, ": ", what, " is on ", t.device(),
                   "; the chorus backend takes CPU tensors");
  CHORUS_ARG_CHECK(t.layout() == at::kStrided, call, ": ", what, " has layout ", t.layout(),
                   "; the chorus backend takes dense (strided) tensors");
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const std::string& call,
                         const char* what) {
  CHORUS_ARG_CHECK(tensors.size() == 1, call, ": the chorus backend takes exactly one ", what,
                   " tensor, got ", tensors.size());
  check_tensor(tensors[0], call, what);
  return tensors[0];
}

void check_like(const at::Tensor& t, at::ScalarType dtype, int64_t numel, const std::string& call,
                const std::string& what) {
  check_tensor(t, call, what.c_str());
  CHORUS_ARG_CHECK(t.scalar_type() == dtype, call, ": ", what, " has dtype ", t.scalar_type(),
                   " but the input has ", dtype);
  CHORUS_ARG_CHECK(t.numel() == numel, call, ": ", what, " has ", t.numel(), " elements, expected ",
                   numel);
}

at::Tensor Staging::input(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  keep_.push_back(c);
  return c;
}

at::Tensor Staging::output(const at::Tensor& t) {
  if (t.is_contiguous()) {
    keep_.push_back(t);
    return t;
  }
  at::Tensor c = at::empty(t.sizes(), t.options());
  keep_.push_back(c);
  copies_.emplace_back(t, c);
  return c;
}

at::Tensor Staging::in_out(const at::Tensor& t) {
  if (t.is_contiguous()) {
    keep_.push_back(t);
    return t;
  }
  at::Tensor c = t.contiguous();
  keep_.push_back(c);
  copies_.emplace_back(t, c);
  return c;
}

at::Tensor Staging::packed(const std::vector<at::Tensor>& tensors, bool read, bool write) {
  CHORUS_CHECK(!tensors.empty());
  at::Tensor c;
  if (read) {
    std::vector<at::Tensor> flat;
    flat.reserve(tensors.size());
    for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
    c = at::cat(flat);
  } else {
    int64_t n = 0;
    for (const auto& t : tensors) n += t.numel();
    c = at::empty({n}, tensors[0].options());
  }
  keep_.push_back(c);
  if (write) {
    int64_t offset = 0;
    for (const auto& t : tensors) {
      copies_.emplace_back(t, c.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
  return c;
}

at::Tensor Staging::packed_input(const std::vector<at::Tensor>& tensors) {
  return packed(tensors, true, false);
}
at::Tensor Staging::packed_output(const std::vector<at::Tensor>& tensors) {
  return packed(tensors, false, true);
}
at::Tensor Staging::packed_in_out(const std::vector<at::Tensor>& tensors) {
  return packed(tensors, true, true);
}

void Staging::copy_back() {
  for (auto& [dst, src] : local_) dst.copy_(src);
  for (auto& [dst, src] : copies_) dst.copy_(src);
}

void Staging::release() {
  keep_.clear();
  local_.clear();
  copies_.clear();
}

}  // namespace chorus::torch
