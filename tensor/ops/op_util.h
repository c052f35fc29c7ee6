// Internal: argument checks and small helpers shared by the op files.
#pragma once

#include "chorus/tensor/autograd.h"
#include "chorus/tensor/ops.h"
#include "cpu/dispatch.h"
#include "cpu/strided.h"

namespace chorus::tensor {

inline void check_defined(const Tensor& t, const char* op, const char* what) {
  CHORUS_ARG_CHECK(t.defined(), op, ": ", what, " is undefined");
  CHORUS_ARG_CHECK(t.device().is_cpu(), op, ": ", what, " is on ", to_string(t.device()),
                   "; only CPU kernels are built");
}

inline void check_same(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op, "first operand");
  check_defined(b, op, "second operand");
  CHORUS_ARG_CHECK(a.shape() == b.shape(), op, ": shapes ", to_string(a.shape()), " vs ",
                   to_string(b.shape()));
  CHORUS_ARG_CHECK(a.dtype() == b.dtype(), op, ": dtypes ", to_string(a.dtype()), " vs ",
                   to_string(b.dtype()));
}

// A contiguous tensor with x's values, outside autograd (kernels read it; the op records x).
inline Tensor dense(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  strided_copy(out, x);
  return out;
}

// x viewed with new geometry, outside autograd.
inline Tensor raw_view(const Tensor& x, Shape shape, Shape strides, int64_t offset) {
  return make_view(x, std::move(shape), std::move(strides), offset);
}

inline int64_t wrap_dim(int64_t d, int64_t ndim, const char* op) {
  if (d < 0) d += ndim;
  CHORUS_ARG_CHECK(d >= 0 && d < ndim, op, ": dim ", d, " out of range for ", ndim, " dims");
  return d;
}

}  // namespace chorus::tensor
