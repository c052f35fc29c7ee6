// chorus — element-wise loops in the aliasing shapes the kernels accept.
//
// The vectoriser must know that a store to dst[i] cannot change a later a[j]. For separate
// buffers `__restrict` says so; for in-place calls (dst == a, dst == b) restrict would be a lie,
// and without it the compiler adds a run-time overlap check that an in-place call fails, falling
// back to scalar code. So every shape gets its own loop in which each buffer has one name.
#pragma once

#include <cstddef>

#include "isa.h"

namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS {

// ---- dst[i] = f(src[i]) -------------------------------------------------------------------------

template <class D, class S, class F>
void map1_disjoint(D* __restrict dst, const S* __restrict src, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) dst[i] = f(src[i]);
}

template <class T, class F>
void map1_in_place(T* __restrict x, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) x[i] = f(x[i]);
}

// dst may equal src; no other overlap.
template <class T, class F>
void map1(T* dst, const T* src, size_t n, F f) {
  if (dst == src)
    map1_in_place(dst, n, f);
  else
    map1_disjoint(dst, src, n, f);
}

// ---- dst[i] = f(a[i], b[i]) ---------------------------------------------------------------------

// The element types may differ (an f32 accumulator combined with bf16 sources).
template <class D, class A, class B, class F>
void map2_disjoint(D* __restrict dst, const A* __restrict a, const B* __restrict b, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) dst[i] = f(a[i], b[i]);
}

template <class A, class B, class F>
void map2_into_a(A* __restrict a, const B* __restrict b, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) a[i] = f(a[i], b[i]);
}

template <class A, class B, class F>
void map2_into_b(const A* __restrict a, B* __restrict b, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) b[i] = f(a[i], b[i]);
}

// dst may equal a, b or both; no other overlap. Operand order is kept in every shape (it matters
// for NaN payloads and for min/max of -0 and +0).
template <class T, class F>
void map2(T* dst, const T* a, const T* b, size_t n, F f) {
  if (a == b)
    map1(dst, a, n, [f](T x) { return f(x, x); });
  else if (dst == a)
    map2_into_a(dst, b, n, f);
  else if (dst == b)
    map2_into_b(a, dst, n, f);
  else
    map2_disjoint(dst, a, b, n, f);
}

}  // namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS
