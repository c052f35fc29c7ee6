// Internal: argument checks and small helpers shared by the op files.
#pragma once

#include <initializer_list>
#include <span>

#include "backend/backend.h"
#include "chorus/tensor/autograd.h"
#include "chorus/tensor/ops.h"

namespace chorus::tensor {

inline void check_defined(const Tensor& t, const char* op, const char* what) {
  CHORUS_ARG_CHECK(t.defined(), op, ": ", what, " is undefined");
}

// One tensor of an op, named as the op's errors name it ("input", "weight").
struct Operand {
  const Tensor& tensor;
  const char* what;
};

// Where one operand of an op is.
struct Placement {
  const char* what;
  Device device;
};

// The device of every placement (the CPU when there is none). InvalidArgument naming the op, the
// first two operands that differ and their devices otherwise: an op never moves data between
// devices behind the caller's back.
Device one_device(const char* op, std::span<const Placement> placements);

// one_device() over the defined operands.
Device same_device(const char* op, std::initializer_list<Operand> operands);

// The backend an op runs on: that of its operands' one device.
inline Backend& backend_of(const char* op, std::initializer_list<Operand> operands) {
  return backend_for(same_device(op, operands));
}

// Float compute dtypes (f32, f64), as every float kernel needs.
void check_float(const Tensor& t, const char* op);

inline void check_same(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op, "first operand");
  check_defined(b, op, "second operand");
  CHORUS_ARG_CHECK(a.shape() == b.shape(), op, ": shapes ", to_string(a.shape()), " vs ",
                   to_string(b.shape()));
  CHORUS_ARG_CHECK(a.dtype() == b.dtype(), op, ": dtypes ", to_string(a.dtype()), " vs ",
                   to_string(b.dtype()));
  same_device(op, {{a, "first operand"}, {b, "second operand"}});
}

// A contiguous tensor with x's values on x's device, outside autograd (kernels read it; the op
// records x).
inline Tensor dense(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend_for(x.device()).copy(out, x, /*accumulate=*/false);
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
