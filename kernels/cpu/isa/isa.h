// chorus — the contract for the sources in kernels/cpu/isa/, which are compiled once per
// instruction set.
//
// kernels/CMakeLists.txt builds every .cc in this folder three times: with
// -DCHORUS_KERNELS_ISA_NS=generic (baseline x86-64), =avx2 (-mavx2 -mfma -mf16c) and =avx512
// (-mavx512f/bw/vl/dq). Two rules keep the resulting single binary safe on any x86-64:
//  * Everything defined here lives in namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS,
//    so the three builds never share a symbol.
//  * Code here ODR-uses no inline function of a shared header (chorus/half.h, <algorithm>, ...).
//    The compiler may emit an out-of-line copy of such a function compiled with AVX-512 flags,
//    and the linker keeps one copy for all callers, baseline ones included. Conversions are
//    therefore restated in this folder (and tested bit-for-bit against chorus/half.h);
//    intrinsics and compiler builtins are always inlined and are fine. The generic build alone may
//    call chorus/half.h, since its code is baseline anyway.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "chorus/half.h"  // Half and BFloat16 as storage types only (see above)
#include "chorus/types.h"

#ifndef CHORUS_KERNELS_ISA_NS
#error "kernels/cpu/isa sources are compiled with -DCHORUS_KERNELS_ISA_NS=generic|avx2|avx512"
#endif

namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS {

// A type as a value, so generic lambdas can receive it: [&]<class T>(Type<T>) { ... }.
template <class T>
struct Type {};

// The C++ storage type of each DataType; f16 and bf16 are stored as their bits.
template <class F>
void visit_dtype(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kF32:
      return f(Type<float>{});
    case DataType::kF64:
      return f(Type<double>{});
    case DataType::kF16:
      return f(Type<Half>{});
    case DataType::kBF16:
      return f(Type<BFloat16>{});
    case DataType::kI8:
      return f(Type<int8_t>{});
    case DataType::kU8:
      return f(Type<uint8_t>{});
    case DataType::kI32:
      return f(Type<int32_t>{});
    case DataType::kI64:
      return f(Type<int64_t>{});
    case DataType::kCount:
      break;
  }
}

template <ReduceOp kOp>
using Op = std::integral_constant<ReduceOp, kOp>;

// kAvg reduces exactly like kSum (the caller divides afterwards), so it shares kSum's code.
template <class F>
void visit_op(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return f(Op<ReduceOp::kSum>{});
    case ReduceOp::kProd:
      return f(Op<ReduceOp::kProd>{});
    case ReduceOp::kMin:
      return f(Op<ReduceOp::kMin>{});
    case ReduceOp::kMax:
      return f(Op<ReduceOp::kMax>{});
    case ReduceOp::kCount:
      break;
  }
}

template <class T>
inline constexpr bool kIs16BitFloat = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Elements per f32 staging block when 16-bit floats are widened for arithmetic, and per
// accumulator block in reduce_n. A few such blocks stay in L1 while the sources stream through.
inline constexpr size_t kStage = 1024;

// The entry points of one build, gathered into its IsaKernels table by table.cc. Their contracts
// are IsaKernels' (kernels/cpu/dispatch.h).
void reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count);
void reduce_n(DataType dtype, ReduceOp op, void* dst, const void* const* srcs, int n, size_t count);
void divide(DataType dtype, void* dst, const void* src, size_t count, int64_t divisor);
void cast(DataType dst_type, void* dst, DataType src_type, const void* src, size_t count);
void copy_stream(void* dst, const void* src, size_t bytes);
void reduce_stream(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b,
                   size_t count, void* also);

}  // namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS
