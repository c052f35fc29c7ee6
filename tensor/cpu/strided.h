// Internal: iteration over strided tensors, one innermost row at a time.
//
// A tensor of shape (d0, ..., dn) with strides (s0, ..., sn) is visited as prod(d0..dn-1) rows
// of dn elements; the callback gets each operand's element offset of the row start and the
// innermost strides, so its loop over the row is a plain (vectorisable) strided loop.
#pragma once

#include <cstdint>
#include <vector>

#include "chorus/tensor/tensor.h"

namespace chorus::tensor {

// fn(off0, off1, n, inner0, inner1) for each innermost row of `shape`; offsets are relative to
// each operand's [0,...,0]. A 0-dim tensor is one row of one element.
template <class Fn>
void for_each_row2(const Shape& shape, const Shape& st0, const Shape& st1, Fn&& fn) {
  const size_t nd = shape.size();
  if (nd == 0) {
    fn(int64_t{0}, int64_t{0}, int64_t{1}, int64_t{1}, int64_t{1});
    return;
  }
  for (int64_t d : shape)
    if (d == 0) return;
  const int64_t n = shape[nd - 1];
  std::vector<int64_t> idx(nd, 0);
  int64_t o0 = 0, o1 = 0;
  while (true) {
    fn(o0, o1, n, st0[nd - 1], st1[nd - 1]);
    // Odometer over the outer dims.
    size_t d = nd - 1;
    while (d > 0) {
      --d;
      if (++idx[d] < shape[d]) {
        o0 += st0[d];
        o1 += st1[d];
        break;
      }
      o0 -= st0[d] * (shape[d] - 1);
      o1 -= st1[d] * (shape[d] - 1);
      idx[d] = 0;
      if (d == 0) return;
    }
    if (nd == 1) return;
  }
}

// Copies src into dst (same shape), converting element types. dst += src when accumulate.
void strided_copy(const Tensor& dst, const Tensor& src, bool accumulate = false);

}  // namespace chorus::tensor
