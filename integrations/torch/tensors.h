// chorus_torch — how tensors are handed to chorus: element types, reduction operators, checks, and
// the staging of tensors chorus cannot use in place (non-contiguous ones, lists of tensors).
//
// Vocabulary. A call's `Staging` keeps every tensor chorus reads or writes alive until the
// operation completes, and lists the copies to make once it has: (destination, staged source).
// A contiguous tensor is used in place; any other is copied into a contiguous one first (inputs)
// and/or copied back afterwards (outputs), so results are never silently wrong.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "chorus/types.h"

namespace chorus::torch {

// A tensor's memory as chorus counts it: elements of a chorus type.
struct Elements {
  void* data;
  size_t count;
  DataType dtype;
};

// For moving data (broadcast, gathers, scatters, all-to-all, point-to-point): the tensor's own
// element type, or its bytes as uint8 when chorus has no such type (bool, int16, complex ...).
Elements movable(const at::Tensor& t);
// For reductions: the element type, with complex tensors as pairs of reals (sum and avg only);
// InvalidArgument naming `call` for a type chorus cannot reduce.
Elements reducible(const at::Tensor& t, const std::string& call, ::c10d::ReduceOp::RedOpType op);
ReduceOp reduce_op(const ::c10d::ReduceOp& op, const std::string& call);

// InvalidArgument naming the call unless `t` is a dense CPU tensor.
void check_tensor(const at::Tensor& t, const std::string& call, const char* what);
// InvalidArgument unless `tensors` holds exactly one tensor (the CPU form of c10d's per-device
// lists).
const at::Tensor& single(const std::vector<at::Tensor>& tensors, const std::string& call,
                         const char* what);
// InvalidArgument unless `t` has `dtype` and `numel` elements.
void check_like(const at::Tensor& t, at::ScalarType dtype, int64_t numel, const std::string& call,
                const std::string& what);

class Staging {
 public:
  // What chorus reads: `t` itself when contiguous, else a contiguous copy.
  at::Tensor input(const at::Tensor& t);
  // What chorus writes: `t` when contiguous, else a contiguous tensor copied into `t` afterwards.
  at::Tensor output(const at::Tensor& t);
  // Read and written (in-place calls): as output(), but starting from t's values.
  at::Tensor in_out(const at::Tensor& t);
  // The list forms: `tensors` (of one dtype) packed one after the other into one contiguous
  // tensor, starting from their values (input, in_out), and copied back into them afterwards
  // (output, in_out).
  at::Tensor packed_input(const std::vector<at::Tensor>& tensors);
  at::Tensor packed_output(const std::vector<at::Tensor>& tensors);
  at::Tensor packed_in_out(const std::vector<at::Tensor>& tensors);
  // A copy between staged tensors to make once the operation has succeeded, before the copies
  // back (an all-to-all's own block).
  void local_copy(const at::Tensor& dst, const at::Tensor& src) { local_.emplace_back(dst, src); }
  // Keeps `t` alive until the operation completes.
  void keep(const at::Tensor& t) { keep_.push_back(t); }

  // Once the operation has succeeded: the copies back into the caller's tensors.
  void copy_back();
  // Once chorus no longer touches any buffer: drops the staged tensors.
  void release();

 private:
  at::Tensor packed(const std::vector<at::Tensor>& tensors, bool read, bool write);

  std::vector<at::Tensor> keep_;
  std::vector<std::pair<at::Tensor, at::Tensor>> local_;   // (destination, source)
  std::vector<std::pair<at::Tensor, at::Tensor>> copies_;  // (destination, source)
};

}  // namespace chorus::torch
