// chorus — the public GPU kernel entry points: validate on the host, then queue the kernel. The
// same checks as the CPU kernels (kernels/cpu/dispatch.cc), so a bad argument fails the same way
// with or without a device, and with or without GPU support.
#include "chorus/error.h"
#include "chorus/kernels/gpu.h"
#include "launch.h"

namespace chorus::kernels::gpu {
namespace {

void check_dtype(DataType dtype) {
  CHORUS_ARG_CHECK(is_valid(dtype), "invalid DataType ", static_cast<int>(dtype));
}

void check_op(ReduceOp op) {
  CHORUS_ARG_CHECK(is_valid(op), "invalid ReduceOp ", static_cast<int>(op));
}

}  // namespace

void reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count,
            chorus::gpu::Stream stream) {
  check_dtype(dtype);
  check_op(op);
  if (count == 0) return;
  CHORUS_ARG_CHECK(dst && a && b, "gpu reduce: null pointer with count ", count);
  const void* srcs[2] = {a, b};
  detail::launch_reduce(dtype, op, dst, srcs, 2, count, stream);
}

void reduce_n(DataType dtype, ReduceOp op, void* dst, const void* const* srcs, int n, size_t count,
              chorus::gpu::Stream stream) {
  check_dtype(dtype);
  check_op(op);
  CHORUS_ARG_CHECK(n >= 1 && n <= kMaxReduceInputs, "gpu reduce_n: n must be in [1, ",
                   kMaxReduceInputs, "], got ", n);
  if (count == 0) return;
  CHORUS_ARG_CHECK(dst && srcs, "gpu reduce_n: null pointer with count ", count);
  for (int k = 0; k < n; ++k)
    CHORUS_ARG_CHECK(srcs[k] != nullptr, "gpu reduce_n: srcs[", k, "] is null with count ", count);
  if (n == 1) {
    // One input: its bits, like the CPU kernel (no round trip through f32 that could quiet a NaN).
    if (dst != srcs[0]) detail::launch_copy(dst, srcs[0], count * dtype_size(dtype), stream);
    return;
  }
  detail::launch_reduce(dtype, op, dst, srcs, n, count, stream);
}

void divide(DataType dtype, void* dst, const void* src, size_t count, int64_t divisor,
            chorus::gpu::Stream stream) {
  check_dtype(dtype);
  CHORUS_ARG_CHECK(divisor != 0, "gpu divide: divisor is 0");
  if (count == 0) return;
  CHORUS_ARG_CHECK(dst && src, "gpu divide: null pointer with count ", count);
  detail::launch_divide(dtype, dst, src, count, divisor, stream);
}

void copy(void* dst, const void* src, size_t bytes, chorus::gpu::Stream stream) {
  if (bytes == 0) return;
  CHORUS_ARG_CHECK(dst && src, "gpu copy: null pointer with ", bytes, " bytes");
  if (dst == src) return;
  detail::launch_copy(dst, src, bytes, stream);
}

void cast(DataType dst_type, void* dst, DataType src_type, const void* src, size_t count,
          chorus::gpu::Stream stream) {
  check_dtype(dst_type);
  check_dtype(src_type);
  if (count == 0) return;
  CHORUS_ARG_CHECK(dst && src, "gpu cast: null pointer with count ", count);
  CHORUS_ARG_CHECK(dst != src || dtype_size(dst_type) == dtype_size(src_type),
                   "gpu cast: in place needs equal element sizes, got ", to_string(dst_type),
                   " and ", to_string(src_type));
  if (dst_type == src_type) {
    if (dst != src) detail::launch_copy(dst, src, count * dtype_size(dst_type), stream);
    return;
  }
  detail::launch_cast(dst_type, dst, src_type, src, count, stream);
}

}  // namespace chorus::kernels::gpu
