// View ops: new geometry over the same storage. Their backward scatters grad_out into the
// matching view of the input's gradient buffer (which has the input's full shape).
#include "ops/op_util.h"
#include "runtime/transfer.h"

namespace chorus::tensor {
namespace {

// dx (a view into a gradient buffer) += dy, on their device.
void accumulate_into(const Tensor& dx, const Tensor& dy) {
  backend_for(dx.device()).copy(dx, dy, /*accumulate=*/true);
}

}  // namespace

// ---- view: x (any shape, contiguous) -> shape with the same numel ------------------------------
Tensor view_op(const Tensor& x, Shape shape) {
  check_defined(x, "view", "input");
  CHORUS_ARG_CHECK(x.is_contiguous(), "view of a non-contiguous ", to_string(x.shape()),
                   " tensor (use reshape)");
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      CHORUS_ARG_CHECK(infer < 0, "view: more than one -1 in ", to_string(shape));
      infer = static_cast<int64_t>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    CHORUS_ARG_CHECK(known > 0 && x.numel() % known == 0, "view: cannot infer -1 in ",
                     to_string(shape), " for ", x.numel(), " elements");
    shape[infer] = x.numel() / known;
  }
  CHORUS_ARG_CHECK(numel_of(shape) == x.numel(), "view: ", to_string(x.shape()), " -> ",
                   to_string(shape));
  Shape strides = contiguous_strides(shape);
  Tensor out = raw_view(x, shape, std::move(strides), x.offset());
  const Shape in_shape = x.shape();
  return record("view", out, {x}, [in_shape](const Tensor& dy, GradSink& g) {
    // dx (in_shape) += dy (shape): both contiguous, so it is a flat add.
    if (Tensor dx = g.grad(0); dx.defined())
      accumulate_into(raw_view(dx, dy.shape(), dy.strides(), dx.offset()), dy);
  });
}

// ---- transpose: x (..., d0, ..., d1, ...) -> dims d0 and d1 swapped ----------------------------
Tensor transpose_op(const Tensor& x, int64_t d0, int64_t d1) {
  check_defined(x, "transpose", "input");
  d0 = wrap_dim(d0, x.dim(), "transpose");
  d1 = wrap_dim(d1, x.dim(), "transpose");
  Shape shape = x.shape(), strides = x.strides();
  std::swap(shape[d0], shape[d1]);
  std::swap(strides[d0], strides[d1]);
  Tensor out = raw_view(x, std::move(shape), std::move(strides), x.offset());
  return record("transpose", out, {x}, [d0, d1](const Tensor& dy, GradSink& g) {
    if (Tensor dx = g.grad(0); dx.defined()) {
      Shape s = dx.shape(), st = dx.strides();
      std::swap(s[d0], s[d1]);
      std::swap(st[d0], st[d1]);
      accumulate_into(raw_view(dx, s, st, dx.offset()), dy);
    }
  });
}

// ---- narrow: x (..., n, ...) -> (..., length, ...) elements [start, start+length) of dim ------
Tensor narrow_op(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  check_defined(x, "narrow", "input");
  dim = wrap_dim(dim, x.dim(), "narrow");
  CHORUS_ARG_CHECK(start >= 0 && length >= 0 && start + length <= x.size(dim), "narrow: [", start,
                   ", ", start + length, ") of a dim of size ", x.size(dim));
  Shape shape = x.shape();
  shape[dim] = length;
  Tensor out = raw_view(x, shape, x.strides(), x.offset() + start * x.stride(dim));
  return record("narrow", out, {x}, [dim, start, length](const Tensor& dy, GradSink& g) {
    if (Tensor dx = g.grad(0); dx.defined()) {
      Shape s = dx.shape();
      s[dim] = length;
      accumulate_into(raw_view(dx, s, dx.strides(), dx.offset() + start * dx.stride(dim)), dy);
    }
  });
}

// ---- select: x (..., n, ...) -> (..., ...) index `index` of dim ---------------------------------
Tensor select_op(const Tensor& x, int64_t dim, int64_t index) {
  check_defined(x, "select", "input");
  dim = wrap_dim(dim, x.dim(), "select");
  CHORUS_ARG_CHECK(index >= 0 && index < x.size(dim), "select: index ", index, " of a dim of size ",
                   x.size(dim));
  Shape shape = x.shape(), strides = x.strides();
  const int64_t offset = x.offset() + index * strides[dim];
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  Tensor out = raw_view(x, std::move(shape), std::move(strides), offset);
  return record("select", out, {x}, [dim, index](const Tensor& dy, GradSink& g) {
    if (Tensor dx = g.grad(0); dx.defined()) {
      Shape s = dx.shape(), st = dx.strides();
      const int64_t off = dx.offset() + index * st[dim];
      s.erase(s.begin() + dim);
      st.erase(st.begin() + dim);
      accumulate_into(raw_view(dx, s, st, off), dy);
    }
  });
}

// ---- contiguous: x (any strides) -> a dense copy ------------------------------------------------
Tensor contiguous_op(const Tensor& x) {
  check_defined(x, "contiguous", "input");
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend_for(x.device()).copy(out, x, /*accumulate=*/false);
  return record("contiguous", out, {x}, [](const Tensor& dy, GradSink& g) {
    if (Tensor dx = g.grad(0); dx.defined()) accumulate_into(dx, dy);
  });
}

// ---- cast: x (dtype a) -> x (dtype b), rounding to nearest even ---------------------------------
Tensor cast_op(const Tensor& x, DataType dtype) {
  check_defined(x, "cast", "input");
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  backend_for(x.device()).copy(out, x, /*accumulate=*/false);
  // The gradient flows back converted to the input's dtype.
  return record("cast", out, {x}, [](const Tensor& dy, GradSink& g) {
    if (Tensor dx = g.grad(0); dx.defined()) accumulate_into(dx, dy);
  });
}

// ---- to(device): x on one device -> a copy on another -------------------------------------------
Tensor to_device_op(const Tensor& x, Device device) {
  check_defined(x, "to", "input");
  Tensor out = Tensor::empty(x.shape(), x.dtype(), device);
  copy_tensor(out, x);
  // The gradient flows back to the input's device.
  return record("to", out, {x}, [](const Tensor& dy, GradSink& g) {
    if (Tensor dx = g.grad(0); dx.defined()) copy_tensor(dx, dy, /*accumulate=*/true);
  });
}

}  // namespace chorus::tensor
