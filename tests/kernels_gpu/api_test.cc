// What runs on every machine: argument checks of the GPU kernels (before any device work), the
// work split of launch.h, the no-GPU build's answers, and failing cleanly without a device.
#include <gtest/gtest.h>

#include <cstdint>

#include "chorus/gpu/runtime.h"
#include "chorus/kernels/gpu.h"
#include "launch.h"

namespace chorus::kernels::gpu {
namespace {

// Never dereferenced: the calls below fail before any device work, or without a device.
void* const kFake = reinterpret_cast<void*>(uintptr_t{0x1000});
void* const kFake2 = reinterpret_cast<void*>(uintptr_t{0x9000});

bool built_with_gpu() { return chorus::gpu::backend() != chorus::gpu::Backend::kNone; }

TEST(GpuKernelArgs, InvalidArgumentsThrowBeforeAnyDeviceWork) {
  const auto bad_dtype = static_cast<DataType>(99);
  const auto bad_op = static_cast<ReduceOp>(99);
  EXPECT_THROW(reduce(bad_dtype, ReduceOp::kSum, kFake, kFake, kFake, 4), InvalidArgument);
  EXPECT_THROW(reduce(DataType::kF32, bad_op, kFake, kFake, kFake, 4), InvalidArgument);
  EXPECT_THROW(reduce(DataType::kF32, ReduceOp::kSum, nullptr, kFake, kFake, 4), InvalidArgument);
  const void* srcs[kMaxReduceInputs + 1] = {};
  for (auto& s : srcs) s = kFake;
  EXPECT_THROW(reduce_n(DataType::kF32, ReduceOp::kSum, kFake, srcs, 0, 4), InvalidArgument);
  EXPECT_THROW(reduce_n(DataType::kF32, ReduceOp::kSum, kFake, srcs, kMaxReduceInputs + 1, 4),
               InvalidArgument);
  srcs[2] = nullptr;
  EXPECT_THROW(reduce_n(DataType::kF32, ReduceOp::kSum, kFake, srcs, 3, 4), InvalidArgument);
  EXPECT_THROW(divide(DataType::kI32, kFake, kFake, 4, 0), InvalidArgument);
  EXPECT_THROW(divide(DataType::kI32, kFake, nullptr, 4, 2), InvalidArgument);
  EXPECT_THROW(copy(nullptr, kFake, 4), InvalidArgument);
  EXPECT_THROW(cast(DataType::kF32, kFake, bad_dtype, kFake, 4), InvalidArgument);
  EXPECT_THROW(cast(DataType::kF64, kFake, DataType::kF32, kFake, 4), InvalidArgument)
      << "in place with different element sizes";
}

TEST(GpuKernelArgs, CountZeroQueuesNothing) {
  // Null pointers and no device are fine when there is nothing to do.
  EXPECT_NO_THROW(reduce(DataType::kF32, ReduceOp::kSum, nullptr, nullptr, nullptr, 0));
  EXPECT_NO_THROW(reduce_n(DataType::kBF16, ReduceOp::kMax, nullptr, nullptr, 3, 0));
  EXPECT_NO_THROW(divide(DataType::kI8, nullptr, nullptr, 0, 3));
  EXPECT_NO_THROW(copy(nullptr, nullptr, 0));
  EXPECT_NO_THROW(cast(DataType::kF16, nullptr, DataType::kI64, nullptr, 0));
}

TEST(GpuKernelArgs, FailCleanlyWithoutDevice) {
  if (!built_with_gpu()) GTEST_SKIP() << "built without GPU support (GpuStubs covers it)";
  if (chorus::gpu::probe_devices().count > 0) GTEST_SKIP() << "a device is present";
  // The launch fails with the runtime's error (no driver / no device); memory is never touched.
  EXPECT_THROW(reduce(DataType::kF32, ReduceOp::kSum, kFake, kFake, kFake, 1024),
               chorus::gpu::GpuError);
  EXPECT_THROW(cast(DataType::kF16, kFake, DataType::kF32, kFake2, 1024), chorus::gpu::GpuError);
  EXPECT_THROW(copy(kFake, kFake2, 1024), chorus::gpu::GpuError);
}

TEST(GpuStubs, EveryKernelSaysBuiltWithoutGpu) {
  if (built_with_gpu()) GTEST_SKIP() << "built with " << to_string(chorus::gpu::backend());
  try {
    reduce(DataType::kF32, ReduceOp::kSum, kFake, kFake, kFake, 4);
    FAIL() << "reduce did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built without GPU support"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(divide(DataType::kF32, kFake, kFake2, 4, 2), Error);
  EXPECT_THROW(copy(kFake, kFake2, 4), Error);
  EXPECT_THROW(cast(DataType::kF16, kFake, DataType::kF32, kFake2, 4), Error);
}

// ---- the work split -----------------------------------------------------------------------------

const void* addr(uintptr_t a) { return reinterpret_cast<const void*>(a); }

TEST(GpuPlan, AlignedPointersStartWithPacks) {
  const detail::Plan p = detail::make_plan({{addr(0x1000), 4}, {addr(0x2000), 4}}, 103, 4);
  EXPECT_EQ(p.head, 0u);
  EXPECT_EQ(p.packs, 25u);  // 100 elements in packs, 3 in the tail
  EXPECT_EQ(p.count, 103u);
}

TEST(GpuPlan, EqualMisalignmentGetsAHead) {
  // f32 at +4 bytes: three elements reach the next 16-byte boundary.
  const detail::Plan p = detail::make_plan({{addr(0x1004), 4}, {addr(0x2004), 4}}, 103, 4);
  EXPECT_EQ(p.head, 3u);
  EXPECT_EQ(p.packs, 25u);
}

TEST(GpuPlan, DifferentMisalignmentGoesElementByElement) {
  const detail::Plan p = detail::make_plan({{addr(0x1004), 4}, {addr(0x2008), 4}}, 103, 4);
  EXPECT_EQ(p.head, 103u);
  EXPECT_EQ(p.packs, 0u);
}

TEST(GpuPlan, MixedElementSizes) {
  // i8 -> f64 cast: 16 elements per pack; src at +1 byte, dst at +8 bytes. At h = 15 the source is
  // aligned (0x1010) and the destination is at 0x2008 + 120 = 0x2080: aligned too.
  const detail::Plan p =
      detail::make_plan({{addr(0x2008), 8}, {addr(0x1001), 1}}, 1000, detail::pack_elems(8, 1));
  EXPECT_EQ(p.head, 15u);
  EXPECT_EQ(p.packs, (1000u - 15u) / 16u);
}

TEST(GpuPlan, ShortCountsNeverOverrun) {
  const detail::Plan p = detail::make_plan({{addr(0x1004), 4}}, 2, 4);
  EXPECT_EQ(p.head, 2u);  // the boundary is three elements away, past the end
  EXPECT_EQ(p.packs, 0u);
  EXPECT_EQ(detail::grid_blocks(0, 256), 1u);
  EXPECT_EQ(detail::grid_blocks(257, 256), 2u);
  EXPECT_EQ(detail::grid_blocks(size_t{1} << 40, 256), 4096u);
}

}  // namespace
}  // namespace chorus::kernels::gpu
