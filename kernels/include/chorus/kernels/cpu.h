// chorus — CPU element-wise kernels: reduce, n-input reduce, avg division, copy, cast.
//
// Every function takes counts in elements (bytes for copy) and works for every DataType x
// ReduceOp. f16/bf16 are computed in f32 registers and rounded once per output element, to
// nearest even, bit-identical to chorus::float_to_half / float_to_bf16. The implementation is
// chosen at run time for the CPU at hand (AVX-512, AVX2, or portable code), so a binary built here
// runs on any x86-64; every choice produces the same bits, except that which NaN (payload) a NaN
// result carries is not specified. Integer sums and products wrap (two's complement). Float min
// and max propagate NaN (if either input is NaN the result is NaN); for equal inputs (-0 and +0)
// they return b. Pointers need only their element type's alignment; count 0 accepts null pointers.
// Invalid arguments throw InvalidArgument before any memory is touched; so does the first call
// when CHORUS_KERNELS_ISA is malformed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chorus/types.h"

namespace chorus::kernels {

// dst[i] = a[i] op b[i]. dst may be a or b (in-place); other overlaps are not allowed.
// kAvg reduces like kSum: the caller finishes with divide().
void reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count);

// reduce() whose stores to dst bypass the caches (non-temporal, as copy_stream), fenced at the end:
// for large results nobody reads soon, where an ordinary store would first read each line of dst
// (see copy_stream). Same bits as reduce(). f16 and bf16, bound by their conversions rather than
// by memory, are stored as reduce() stores them (streaming measured slower). With `also`, the
// same result is stored there too, with ordinary stores, in the same pass (a result that is both
// kept and passed on, like a ring's reduced piece forwarded through shared memory). dst and also
// must overlap neither each other nor a or b.
void reduce_stream(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b,
                   size_t count, void* also = nullptr);

// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], folded left to right (so every rank
// that calls it with the same inputs in the same order gets the same bits). f16/bf16 accumulate
// in f32 and round once. n >= 1; dst may be one of srcs.
void reduce_n(DataType dtype, ReduceOp op, void* dst, const void* const* srcs, int n, size_t count);

// dst[i] = src[i] / divisor (the last step of kAvg). Integers truncate toward zero (min / -1 wraps
// to min); floats are divided in their own precision (f16/bf16 via f32). divisor != 0. dst may
// equal src.
void divide(DataType dtype, void* dst, const void* src, size_t count, int64_t divisor);

// memcpy (it measured faster than non-temporal stores here; see kernels/cpu/copy.cc). Overlapping
// ranges are tolerated (copied as by memmove).
void copy(void* dst, const void* src, size_t bytes);

// A copy whose stores bypass the caches (non-temporal), fenced at the end. For large
// destinations nobody reads soon, such as a collective's result: an ordinary store to a line not
// in cache first reads the line (read for ownership), which this saves, and it does not evict
// what the caller still needs. Slower than copy() when the destination is read again soon.
// dst and src must not overlap.
void copy_stream(void* dst, const void* src, size_t bytes);

// Element-wise conversion between any two DataTypes. To a float type: round to nearest even, once
// (f64 or i64 -> bf16 is not rounded twice through f32). Float to integer: truncate toward zero
// and saturate: NaN -> 0, values beyond the range -> the nearest limit. Integer to integer: wrap
// (like static_cast). dst must not overlap src, except dst == src when both types have the same
// size.
void cast(DataType dst_type, void* dst, DataType src_type, const void* src, size_t count);

// The instruction set the dispatcher chose: "avx512", "avx2" or "generic". CHORUS_KERNELS_ISA
// (same names) forces a lower one, for tests and comparisons.
const char* isa_name();

}  // namespace chorus::kernels
