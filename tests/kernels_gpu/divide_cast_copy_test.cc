// GPU divide, cast and copy against the CPU kernels, bit for bit.
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "chorus/kernels/cpu.h"
#include "chorus/kernels/gpu.h"
#include "gpu_test.h"

namespace chorus::kernels::gpu::testing {
namespace {

// ---- divide -------------------------------------------------------------------------------------

class GpuDivide : public DeviceTest, public ::testing::WithParamInterface<DataType> {};

TEST_P(GpuDivide, MatchesCpu) {
  const DataType dtype = GetParam();
  const size_t count = (size_t{1} << 16) + 5;
  for (int64_t divisor : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{-1}, int64_t{-7},
                          int64_t{1000}, int64_t{1} << 40}) {
    for (size_t off : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "divisor " << divisor << " offset " << off);
      const Buffer src = random_buffer(dtype, count, 77);
      Buffer want(dtype, count);
      chorus::kernels::divide(dtype, want.at(off), src.at(off), count, divisor);
      auto d = to_device(src.bytes);
      divide(dtype, at(d, dtype, off), at(d, dtype, off), count, divisor);  // in place
      Buffer got(dtype, count);
      got.bytes = to_host(d);
      ASSERT_TRUE(same_elements(dtype, want.at(off), got.at(off), count));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, GpuDivide, ::testing::ValuesIn(kAllDataTypes),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// ---- cast ---------------------------------------------------------------------------------------

using CastParam = std::tuple<DataType, DataType>;  // dst, src

class GpuCast : public DeviceTest, public ::testing::WithParamInterface<CastParam> {};

TEST_P(GpuCast, MatchesCpu) {
  const auto [dst_type, src_type] = GetParam();
  for (size_t count : {size_t{1}, size_t{31}, size_t{40000}}) {
    for (size_t off : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "count " << count << " offset " << off);
      const Buffer src = random_buffer(src_type, count, 1234 + count);
      Buffer want(dst_type, count);
      chorus::kernels::cast(dst_type, want.at(off), src_type, src.at(off), count);
      const auto ds = to_device(src.bytes);
      chorus::gpu::DeviceBuffer dd(want.bytes.size());
      cast(dst_type, at(dd, dst_type, off), src_type, at(ds, src_type, off), count);
      Buffer got(dst_type, count);
      got.bytes = to_host(dd);
      ASSERT_TRUE(same_elements(dst_type, want.at(off), got.at(off), count));
    }
  }
}

TEST_P(GpuCast, InPlaceForEqualSizes) {
  const auto [dst_type, src_type] = GetParam();
  if (dtype_size(dst_type) != dtype_size(src_type))
    GTEST_SKIP() << "in-place cast needs equal element sizes";
  const size_t count = 4099;
  const Buffer src = random_buffer(src_type, count, 99);
  Buffer want(dst_type, count);
  chorus::kernels::cast(dst_type, want.at(0), src_type, src.at(0), count);
  auto d = to_device(src.bytes);
  cast(dst_type, d.data(), src_type, d.data(), count);
  Buffer got(dst_type, count);
  got.bytes = to_host(d);
  EXPECT_TRUE(same_elements(dst_type, want.at(0), got.at(0), count));
}

INSTANTIATE_TEST_SUITE_P(All, GpuCast,
                         ::testing::Combine(::testing::ValuesIn(kAllDataTypes),
                                            ::testing::ValuesIn(kAllDataTypes)),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_from_" +
                                  std::string(to_string(std::get<1>(info.param)));
                         });

// ---- copy ---------------------------------------------------------------------------------------

class GpuCopy : public DeviceTest {};

TEST_F(GpuCopy, EverySizeAndAlignment) {
  struct Case {
    size_t bytes, dst_off, src_off;
  };
  const Case cases[] = {{1, 0, 0},
                        {15, 0, 0},
                        {16, 0, 0},
                        {17, 3, 3},
                        {4099, 0, 1},
                        {4099, 7, 3},
                        {65536, 5, 5},
                        {(size_t{1} << 22) + 1, 0, 0},
                        {(size_t{1} << 22) + 1, 9, 9},
                        {(size_t{1} << 22) + 1, 1, 2}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << c.bytes << " bytes, dst+" << c.dst_off << " src+" << c.src_off);
    std::vector<unsigned char> src(c.bytes + 16);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
    const auto ds = to_device(src);
    chorus::gpu::DeviceBuffer dd(c.bytes + 16);
    chorus::gpu::memset_async(dd.data(), 0xEE, dd.bytes(), {});
    copy(static_cast<unsigned char*>(dd.data()) + c.dst_off,
         static_cast<const unsigned char*>(ds.data()) + c.src_off, c.bytes);
    const std::vector<unsigned char> got = to_host(dd);
    ASSERT_EQ(0, std::memcmp(got.data() + c.dst_off, src.data() + c.src_off, c.bytes));
    for (size_t i = 0; i < c.dst_off; ++i) ASSERT_EQ(got[i], 0xEE) << "wrote before dst at " << i;
    for (size_t i = c.dst_off + c.bytes; i < got.size(); ++i)
      ASSERT_EQ(got[i], 0xEE) << "wrote past the end at " << i;
  }
}

}  // namespace
}  // namespace chorus::kernels::gpu::testing
