// Choosing the instruction set, and the public entry points' argument checks.
#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/kernels/cpu.h"
#include "test_data.h"

namespace chorus::kernels::testing {
namespace {

using detail::resolve_isa;

TEST(Dispatch, EveryTableIsNamedAfterItsIsa) {
  for (Isa isa : detail::kAllIsas) {
    EXPECT_EQ(detail::to_string(isa), detail::kernels_for(isa).name);
    EXPECT_EQ(detail::parse_isa(detail::to_string(isa)), isa);
  }
  EXPECT_FALSE(detail::parse_isa("sse4").has_value());
  EXPECT_TRUE(detail::cpu_supports(Isa::kGeneric));
  EXPECT_EQ(detail::supported_isas().back(), detail::best_isa());
}

TEST(Dispatch, ResolveHonoursTheKnobDownwardsOnly) {
  EXPECT_EQ(resolve_isa(std::nullopt, Isa::kAvx512), Isa::kAvx512);
  EXPECT_EQ(resolve_isa("generic", Isa::kAvx512), Isa::kGeneric);
  EXPECT_EQ(resolve_isa("avx2", Isa::kAvx2), Isa::kAvx2);
  EXPECT_THROW(resolve_isa("avx512", Isa::kAvx2), InvalidArgument);
  EXPECT_THROW(resolve_isa("neon", Isa::kAvx512), InvalidArgument);
}

TEST(Dispatch, ActiveIsaFollowsTheEnvironment) {
  const std::optional<std::string> forced = env_get("CHORUS_KERNELS_ISA");
  EXPECT_EQ(std::string(isa_name()), detail::to_string(resolve_isa(forced, detail::best_isa())));
}

TEST(PublicApi, ZeroCountAcceptsNullPointers) {
  reduce(DataType::kF32, ReduceOp::kSum, nullptr, nullptr, nullptr, 0);
  reduce_n(DataType::kF16, ReduceOp::kMax, nullptr, nullptr, 3, 0);
  divide(DataType::kI32, nullptr, nullptr, 0, 4);
  cast(DataType::kBF16, nullptr, DataType::kI64, nullptr, 0);
}

TEST(PublicApi, RejectsInvalidArguments) {
  float x = 1, y = 2;
  const void* srcs[] = {&x, nullptr};
  EXPECT_THROW(reduce(DataType::kCount, ReduceOp::kSum, &x, &x, &y, 1), InvalidArgument);
  EXPECT_THROW(reduce(DataType::kF32, ReduceOp::kCount, &x, &x, &y, 1), InvalidArgument);
  EXPECT_THROW(reduce(DataType::kF32, ReduceOp::kSum, nullptr, &x, &y, 1), InvalidArgument);
  EXPECT_THROW(reduce_n(DataType::kF32, ReduceOp::kSum, &x, srcs, 0, 1), InvalidArgument);
  EXPECT_THROW(reduce_n(DataType::kF32, ReduceOp::kSum, &x, srcs, 2, 1), InvalidArgument);
  EXPECT_THROW(divide(DataType::kF32, &x, &x, 1, 0), InvalidArgument);
}

TEST(PublicApi, AverageIsSumThenDivide) {
  const float a[] = {1, 2, 3};
  const float b[] = {3, 4, 6};
  float out[3];
  reduce(DataType::kF32, ReduceOp::kAvg, out, a, b, 3);
  divide(DataType::kF32, out, out, 3, 2);
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], 3.0f);
  EXPECT_EQ(out[2], 4.5f);
}

}  // namespace
}  // namespace chorus::kernels::testing
