// chorus — GPU element-wise kernels: reduce, n-input reduce, avg division, copy, cast.
//
// The same contract as the CPU kernels (chorus/kernels/cpu.h), which are their reference: every
// DataType x ReduceOp; f16/bf16 computed in f32 and rounded once per output element, to nearest
// even; integer sums and products wrap; float min/max propagate NaN and return b for equal inputs;
// kAvg reduces like kSum and divide() finishes it; cast rounds once, truncates and saturates float
// to integer (NaN -> 0) and wraps integer to integer. Results are bit-identical to the CPU kernels
// except for which NaN (payload) a NaN result carries.
//
// Every call is asynchronous on `stream` (Stream{} is the default stream) and returns once the
// kernel is queued; pointers must be addressable by the current device (its memory, managed
// memory, or a peer's memory mapped through IPC or peer access). Elements need only their type's
// alignment: pointers that share their offset modulo 16 bytes are accessed 16 bytes at a time
// after a short head, others element by element. Count 0 accepts null pointers and queues nothing.
// Invalid arguments throw InvalidArgument before anything is queued; a failed launch throws
// chorus::gpu::GpuError. In a chorus built without GPU support every call with count > 0 throws
// chorus::Error ("built without GPU support").
#pragma once

#include <cstddef>
#include <cstdint>

#include "chorus/gpu/runtime.h"
#include "chorus/types.h"

namespace chorus::kernels::gpu {

// The most inputs one reduce_n call combines (a direct all-reduce across the GPUs of a host).
inline constexpr int kMaxReduceInputs = 16;

// dst[i] = a[i] op b[i]. dst may be a or b (in-place); other overlaps are not allowed.
void reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count,
            chorus::gpu::Stream stream = {});

// dst[i] = srcs[0][i] op ... op srcs[n-1][i], folded left to right, f16/bf16 in f32 rounded once.
// srcs is a host array of n device pointers, 1 <= n <= kMaxReduceInputs (it is copied at launch);
// dst may be one of the sources.
void reduce_n(DataType dtype, ReduceOp op, void* dst, const void* const* srcs, int n, size_t count,
              chorus::gpu::Stream stream = {});

// dst[i] = src[i] / divisor (the last step of kAvg). Integers truncate toward zero (min / -1 wraps
// to min); floats divide in their own precision (f16/bf16 via f32). divisor != 0; dst may be src.
void divide(DataType dtype, void* dst, const void* src, size_t count, int64_t divisor,
            chorus::gpu::Stream stream = {});

// A copy done by a kernel (for when copy engines are busy or cannot reach the memory); dst and src
// must not overlap. chorus::gpu::memcpy_async is the copy-engine path.
void copy(void* dst, const void* src, size_t bytes, chorus::gpu::Stream stream = {});

// Element-wise conversion between any two DataTypes (see the CPU kernel for the rounding rules).
// dst must not overlap src, except dst == src when both types have the same size.
void cast(DataType dst_type, void* dst, DataType src_type, const void* src, size_t count,
          chorus::gpu::Stream stream = {});

}  // namespace chorus::kernels::gpu
