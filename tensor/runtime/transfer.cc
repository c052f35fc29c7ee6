#include "runtime/transfer.h"

#include "backend/backend.h"

namespace chorus::tensor {
namespace {

// x as a dense tensor of `dtype` on x's own device (x itself when it is one).
Tensor dense_as(const Tensor& x, DataType dtype) {
  if (x.is_contiguous() && x.dtype() == dtype) return x;
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  backend_for(x.device()).copy(out, x, /*accumulate=*/false);
  return out;
}

// dst itself when the bytes can land there directly, else a dense buffer of `dtype` beside it.
Tensor landing(const Tensor& dst, DataType dtype, bool accumulate) {
  if (!accumulate && dst.is_contiguous() && dst.dtype() == dtype) return dst;
  return Tensor::empty(dst.shape(), dtype, dst.device());
}

}  // namespace

void copy_tensor(const Tensor& dst, const Tensor& src, bool accumulate) {
  CHORUS_ARG_CHECK(dst.defined() && src.defined(), "copy with an undefined tensor");
  CHORUS_ARG_CHECK(dst.shape() == src.shape(), "copy: shape ", to_string(dst.shape()), " vs ",
                   to_string(src.shape()));
  const Device to = dst.device(), from = src.device();
  if (to == from) {
    backend_for(to).copy(dst, src, accumulate);
    return;
  }
  if (dst.numel() == 0) return;
  if (from.is_cpu()) {
    // Converted on the CPU, then uploaded as dst's dtype.
    const Tensor staged = dense_as(src, dst.dtype());
    const Tensor land = landing(dst, dst.dtype(), accumulate);
    backend_for(to).copy_from_host(land, staged.data_ptr());
    if (land.impl() != dst.impl()) backend_for(to).copy(dst, land, accumulate);
    return;
  }
  const Tensor staged = dense_as(src, src.dtype());
  if (to.is_cpu()) {
    // Downloaded as src's dtype, then converted on the CPU.
    const Tensor land = landing(dst, src.dtype(), accumulate);
    backend_for(from).copy_to_host(land.data_ptr(), staged);
    if (land.impl() != dst.impl()) backend_for(to).copy(dst, land, accumulate);
    return;
  }
  const Tensor land = landing(dst, src.dtype(), accumulate);
  backend_for(to).copy_from_peer(land, staged);
  if (land.impl() != dst.impl()) backend_for(to).copy(dst, land, accumulate);
}

}  // namespace chorus::tensor
