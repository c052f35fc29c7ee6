// Calls on device buffers that move by IPC are chosen by the IPC path's own cost constants
// (chorus-tune --device; docs/GPU.md, "Choosing algorithms on device buffers"), calls on host
// buffers by the host's, and both run exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gpu_world.h"

namespace chorus::testing {
namespace {

class GpuSelection : public GpuWorld {};

// The host's constants say direct, the IPC path's tree (all_reduce at 2 ranks, any size).
TEST_F(GpuSelection, IpcPathChoosesByItsOwnConstants) {
  const std::string cost = ::testing::TempDir() + "gpu_selection_cost.txt";
  std::ofstream(cost) << "shm 2 all_reduce tree 0 50 50\n"
                         "shm 2 all_reduce direct 0 1 2\n"
                         "ipc 2 all_reduce tree 0 1 2\n"
                         "ipc 2 all_reduce direct 0 50 50\n";
  RunOptions options;
  options.env["CHORUS_COST_FILE"] = cost;
  options.env["CHORUS_GPU_PATH"] = "ipc";
  run_ranks(
      2,
      [](Communicator& comm) {
        use_rank_device();
        constexpr size_t kCount = (size_t{1} << 16) + 5;  // i32 elements
        const size_t bytes = kCount * sizeof(int32_t);
        EXPECT_EQ(comm.priced_link(BufferMemory::kDevice), "ipc");
        EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, bytes, BufferMemory::kDevice), "tree");
        EXPECT_EQ(comm.algorithm_for(Collective::kAllReduce, bytes), "direct");

        gpu::DeviceBuffer buf(bytes);
        gpu::PinnedHostBuffer out(bytes);
        gpu::memset_async(buf.data(), 0x01, bytes, {});
        Work device = comm.all_reduce_async(buf.data(), buf.data(), kCount, DataType::kI32,
                                            ReduceOp::kSum, gpu::Stream{});
        device.wait();
        EXPECT_EQ(device.algorithm(), "tree");
        gpu::memcpy_async(out.data(), buf.data(), bytes, {});
        gpu::stream_synchronize({});
        const auto* v = static_cast<const int32_t*>(out.data());
        for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(v[i], 2 * 0x01010101) << "element " << i;

        std::vector<int32_t> host(kCount, comm.rank() + 1), sum(kCount);
        Work on_host =
            comm.all_reduce_async(host.data(), sum.data(), kCount, DataType::kI32, ReduceOp::kSum);
        on_host.wait();
        EXPECT_EQ(on_host.algorithm(), "direct");
        EXPECT_EQ(sum.front(), 3);
        EXPECT_EQ(sum.back(), 3);
      },
      options);
}

}  // namespace
}  // namespace chorus::testing
