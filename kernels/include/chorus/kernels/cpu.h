// chorus — CPU element-wise kernels: reduce, n-input reduce, avg division, copy, cast.
//
// Every function takes counts in elements (bytes for copy) and works for every DataType x
// ReduceOp. f16/bf16 are computed in f32 registers and rounded once per output element. The
// implementation is chosen at run time for the CPU at hand (AVX-512, AVX2, or portable code), so a
// binary built here runs on any x86-64. Integer sums and products wrap (two's complement).
#pragma once

#include <cstddef>
#include <cstdint>

#include "chorus/types.h"

namespace chorus::kernels {

// dst[i] = a[i] op b[i]. dst may be a or b (in-place); other overlaps are not allowed.
// kAvg reduces like kSum: the caller finishes with divide().
void reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count);

// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], folded left to right (so every rank
// that calls it with the same inputs in the same order gets the same bits). f16/bf16 accumulate
// in f32 and round once. n >= 1; dst may be one of srcs.
void reduce_n(DataType dtype, ReduceOp op, void* dst, const void* const* srcs, int n, size_t count);

// dst[i] = src[i] / divisor (the last step of kAvg). Integers truncate toward zero; floats are
// divided in their own precision (f16/bf16 via f32). dst may equal src.
void divide(DataType dtype, void* dst, const void* src, size_t count, int64_t divisor);

// memcpy that may use non-temporal stores for large, non-overlapping copies.
void copy(void* dst, const void* src, size_t bytes);

// Element-wise conversion between any two DataTypes (floats to integers truncate toward zero;
// out-of-range values are unspecified but never UB).
void cast(DataType dst_type, void* dst, DataType src_type, const void* src, size_t count);

// The instruction set the dispatcher chose: "avx512", "avx2" or "generic". CHORUS_KERNELS_ISA
// (same names) forces a lower one, for tests and comparisons.
const char* isa_name();

}  // namespace chorus::kernels
