// GPU reduce and reduce_n against the CPU kernels, bit for bit: every dtype x op, counts across
// the head/pack/tail split, aligned, equally misaligned (head path) and differently misaligned
// (element path) pointers, in place and out of place.
#include <string>
#include <tuple>
#include <vector>

#include "chorus/kernels/cpu.h"
#include "chorus/kernels/gpu.h"
#include "gpu_test.h"

namespace chorus::kernels::gpu::testing {
namespace {

constexpr size_t kCounts[] = {1, 7, 33, 4099, (size_t{1} << 20) | 3};

// Element offsets of (dst, sources) from a 16-byte boundary.
struct Offsets {
  size_t dst;
  size_t src;
};
constexpr Offsets kOffsets[] = {{0, 0}, {1, 1}, {1, 0}};

using Param = std::tuple<DataType, ReduceOp>;

class GpuReduce : public DeviceTest, public ::testing::WithParamInterface<Param> {};

TEST_P(GpuReduce, TwoInputsMatchCpu) {
  const auto [dtype, op] = GetParam();
  for (size_t count : kCounts) {
    for (const Offsets off : kOffsets) {
      SCOPED_TRACE(::testing::Message()
                   << "count " << count << " dst offset " << off.dst << " src offset " << off.src);
      const Buffer a = random_buffer(dtype, count, 11 + count);
      const Buffer b = random_buffer(dtype, count, 23 + count);
      Buffer want(dtype, count);
      chorus::kernels::reduce(dtype, op, want.at(off.dst), a.at(off.src), b.at(off.src), count);

      const auto da = to_device(a.bytes);
      const auto db = to_device(b.bytes);
      chorus::gpu::DeviceBuffer dd(want.bytes.size());
      reduce(dtype, op, at(dd, dtype, off.dst), at(da, dtype, off.src), at(db, dtype, off.src),
             count);
      Buffer got(dtype, count);
      got.bytes = to_host(dd);
      ASSERT_TRUE(same_elements(dtype, want.at(off.dst), got.at(off.dst), count));
    }
  }
}

TEST_P(GpuReduce, InPlaceMatchesCpu) {
  const auto [dtype, op] = GetParam();
  const size_t count = 4099;
  const Buffer a = random_buffer(dtype, count, 5);
  const Buffer b = random_buffer(dtype, count, 6);
  Buffer want = a;
  chorus::kernels::reduce(dtype, op, want.at(1), want.at(1), b.at(1), count);

  auto da = to_device(a.bytes);
  const auto db = to_device(b.bytes);
  chorus::gpu::OwnedStream stream;
  reduce(dtype, op, at(da, dtype, 1), at(da, dtype, 1), at(db, dtype, 1), count, stream);
  chorus::gpu::stream_synchronize(stream);
  Buffer got(dtype, count);
  got.bytes = to_host(da);
  EXPECT_TRUE(same_elements(dtype, want.at(1), got.at(1), count));
}

TEST_P(GpuReduce, NInputsMatchCpu) {
  const auto [dtype, op] = GetParam();
  const size_t count = 33333;
  for (int n : {1, 2, 3, 5, kMaxReduceInputs}) {
    for (int in_place : {-1, 0, n - 1}) {  // dst separate, dst == srcs[0], dst == srcs[n-1]
      SCOPED_TRACE(::testing::Message() << "n " << n << " in place at " << in_place);
      std::vector<Buffer> inputs;
      std::vector<const void*> host_srcs;
      for (int k = 0; k < n; ++k) inputs.push_back(random_buffer(dtype, count, 100 + k));
      for (int k = 0; k < n; ++k) host_srcs.push_back(inputs[k].at(0));
      Buffer want(dtype, count);
      chorus::kernels::reduce_n(dtype, op, want.at(0), host_srcs.data(), n, count);

      std::vector<chorus::gpu::DeviceBuffer> dev;
      std::vector<const void*> dev_srcs;
      for (int k = 0; k < n; ++k) dev.push_back(to_device(inputs[k].bytes));
      for (int k = 0; k < n; ++k) dev_srcs.push_back(dev[k].data());
      chorus::gpu::DeviceBuffer separate(want.bytes.size());
      chorus::gpu::DeviceBuffer& dst = in_place < 0 ? separate : dev[in_place];
      reduce_n(dtype, op, dst.data(), dev_srcs.data(), n, count);
      Buffer got(dtype, count);
      got.bytes = to_host(dst);
      ASSERT_TRUE(same_elements(dtype, want.at(0), got.at(0), count));
    }
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(to_string(std::get<0>(info.param))) + "_" +
         std::string(to_string(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(All, GpuReduce,
                         ::testing::Combine(::testing::ValuesIn(kAllDataTypes),
                                            ::testing::ValuesIn(kAllReduceOps)),
                         param_name);

}  // namespace
}  // namespace chorus::kernels::gpu::testing
