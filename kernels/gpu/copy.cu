// chorus — GPU copy by a kernel: 16-byte words when source and destination share their offset
// modulo 16 (after a head of single bytes), single bytes otherwise (still coalesced across a warp).
#include "map.cuh"

namespace chorus::kernels::gpu::detail {
namespace {

__global__ void __launch_bounds__(kThreads)
    copy_kernel(unsigned char* dst, const unsigned char* src, Plan plan) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  const size_t tid = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  for (size_t i = tid; i < plan.head; i += stride) dst[i] = src[i];
  const uint4* words_in = reinterpret_cast<const uint4*>(src + plan.head);
  uint4* words_out = reinterpret_cast<uint4*>(dst + plan.head);
  for (size_t p = tid; p < plan.packs; p += stride) words_out[p] = words_in[p];
  for (size_t i = plan.head + plan.packs * kAccessBytes + tid; i < plan.count; i += stride)
    dst[i] = src[i];
}

}  // namespace

void launch_copy(void* dst, const void* src, size_t bytes, chorus::gpu::Stream stream) {
  const Plan plan = make_plan({{dst, 1}, {src, 1}}, bytes, kAccessBytes);
  const size_t tail = bytes - plan.head - plan.packs * kAccessBytes;
  size_t units = plan.packs > plan.head ? plan.packs : plan.head;
  units = units > tail ? units : tail;
  copy_kernel<<<grid_blocks(units, kThreads), kThreads, 0,
                static_cast<cudaStream_t>(stream.native)>>>(
      static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), plan);
  check_launch("gpu copy kernel");
}

}  // namespace chorus::kernels::gpu::detail
