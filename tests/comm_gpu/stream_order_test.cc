// Stream ordering (NCCL's semantics): a collective on a stream starts after the work queued on
// it before (and sees what that work wrote), work queued after it waits for it, on the device,
// with no host synchronisation in between and without blocking the calling thread; operations
// on two streams still complete in issue order; Work::wait() and test(); host buffers given with
// a stream; and a communicator destroyed with operations outstanding leaves no stream waiting.
// Each on the IPC path and on pinned-host staging.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "gpu_world.h"

namespace chorus::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kCount = (size_t{1} << 20) + 3;  // i32 elements

// i32 sum of memset(0x01) inputs: every element of every rank is 0x01010101.
int32_t summed_ones(int n) { return 0x01010101 * n; }

// n x 0x01010101 elements, read back through pinned memory (the copy never blocks the host).
bool all_equal(const gpu::PinnedHostBuffer& host, size_t count, int32_t value) {
  const auto* v = static_cast<const int32_t*>(host.data());
  for (size_t i = 0; i < count; ++i)
    if (v[i] != value) return false;
  return true;
}

class GpuStreamOrder : public GpuPathWorld {};

// [held] [memset inputs] [all_reduce] [copy result to host] on one stream: the call returns at
// once, nothing runs while the stream is held, and once released the copy sees the sum of the
// memset inputs.
TEST_P(GpuStreamOrder, EarlierWorkIsSeenAndLaterWorkWaits) {
  const int n = world();
  run_ranks(n, [n](Communicator& comm) {
    use_rank_device();
    gpu::DeviceBuffer send(kCount * 4), recv(kCount * 4);
    gpu::PinnedHostBuffer out(kCount * 4);
    std::memset(out.data(), 0, kCount * 4);
    gpu::memset_async(send.data(), 0, kCount * 4, {});  // not what the collective must see
    gpu::memset_async(recv.data(), 0, kCount * 4, {});
    gpu::stream_synchronize({});
    HeldStream stream;
    gpu::Event copied;
    stream.hold();
    gpu::memset_async(send.data(), 0x01, kCount * 4, stream);
    const auto t0 = Clock::now();
    Work work = comm.all_reduce_async(send.data(), recv.data(), kCount, DataType::kI32,
                                      ReduceOp::kSum, stream);
    gpu::memcpy_async(out.data(), recv.data(), kCount * 4, stream);
    copied.record(stream);
    EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(500)) << "the call blocked the host";
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(work.test()) << "the collective ran before the work queued ahead of it";
    EXPECT_FALSE(copied.query());
    stream.release();
    work.wait();
    ASSERT_TRUE(stream.drains_within(30));
    EXPECT_TRUE(all_equal(out, kCount, summed_ones(n)));
  });
}

// Work queued after the collective waits on the device, and the host thread is free meanwhile:
// the rank issues three dependent collectives and a copy back to back, then checks only at the
// end (each all_reduce doubles the n-fold sum).
TEST_P(GpuStreamOrder, BackToBackWithoutHostSynchronisation) {
  const int n = world();
  run_ranks(n, [n](Communicator& comm) {
    use_rank_device();
    gpu::DeviceBuffer buf(kCount * 4);
    gpu::PinnedHostBuffer out(kCount * 4);
    HeldStream stream;
    gpu::memset_async(buf.data(), 0x01, kCount * 4, stream);
    std::vector<Work> works;
    for (int i = 0; i < 3; ++i)
      works.push_back(comm.all_reduce_async(buf.data(), buf.data(), kCount, DataType::kI32,
                                            ReduceOp::kSum, stream));
    gpu::memcpy_async(out.data(), buf.data(), kCount * 4, stream);
    for (Work& w : works) w.wait();
    ASSERT_TRUE(stream.drains_within(30));
    EXPECT_TRUE(all_equal(out, kCount, 0x01010101 * n * n * n));
  });
}

// Operation 1 on stream A (held), operation 2 on stream B: operations complete in issue order,
// so B's collective and the copy after it wait for A's to finish.
TEST_P(GpuStreamOrder, TwoStreamsCompleteInIssueOrder) {
  const int n = world();
  run_ranks(n, [n](Communicator& comm) {
    use_rank_device();
    gpu::DeviceBuffer x(kCount * 4), y(kCount * 4);
    gpu::PinnedHostBuffer out_x(kCount * 4), out_y(kCount * 4);
    HeldStream a;
    gpu::OwnedStream b;
    gpu::memset_async(x.data(), 0x01, kCount * 4, a);
    gpu::memset_async(y.data(), 0x01, kCount * 4, b);
    gpu::stream_synchronize(b);
    a.hold();
    Work wx = comm.all_reduce_async(x.data(), x.data(), kCount, DataType::kI32, ReduceOp::kSum, a);
    Work wy = comm.all_reduce_async(y.data(), y.data(), kCount, DataType::kI32, ReduceOp::kSum, b);
    gpu::memcpy_async(out_y.data(), y.data(), kCount * 4, b);
    gpu::memcpy_async(out_x.data(), x.data(), kCount * 4, a);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(wx.test());
    EXPECT_FALSE(wy.test()) << "a later operation finished before an earlier one";
    EXPECT_FALSE(gpu::stream_query(b));
    a.release();
    wx.wait();
    wy.wait();
    gpu::stream_synchronize(b);
    ASSERT_TRUE(a.drains_within(30));
    EXPECT_TRUE(all_equal(out_x, kCount, summed_ones(n)));
    EXPECT_TRUE(all_equal(out_y, kCount, summed_ones(n)));
  });
}

// Host buffers given with a stream: the operation waits for the stream's earlier work.
TEST_P(GpuStreamOrder, HostBuffersFollowTheStream) {
  const int n = world();
  run_ranks(n, [n](Communicator& comm) {
    use_rank_device();
    std::vector<double> v(4099, 1.0);
    HeldStream stream;
    stream.hold();
    Work w =
        comm.all_reduce_async(v.data(), v.data(), v.size(), DataType::kF64, ReduceOp::kSum, stream);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(w.test()) << "ran before the stream's earlier work";
    EXPECT_EQ(v[0], 1.0);
    stream.release();
    w.wait();
    for (double x : v) ASSERT_EQ(x, static_cast<double>(n));
    ASSERT_TRUE(stream.drains_within(30));
  });
}

// Plain blocking calls on device buffers return once the results are in place, interleaved with
// host-buffer calls on the same communicator.
TEST_P(GpuStreamOrder, PlainCallsMixWithHostCalls) {
  const int n = world();
  run_ranks(n, [n](Communicator& comm) {
    use_rank_device();
    gpu::DeviceBuffer d(kCount * 4);
    std::vector<int32_t> h(kCount, 1), back(kCount);
    for (int i = 0; i < 3; ++i) {
      gpu::memset_async(d.data(), 0x01, kCount * 4, {});
      comm.all_reduce(d.data(), d.data(), kCount, DataType::kI32, ReduceOp::kSum);
      comm.all_reduce(h.data(), h.data(), kCount, DataType::kI32, ReduceOp::kMax);
      gpu::memcpy_async(back.data(), d.data(), kCount * 4, {});
      gpu::stream_synchronize({});
      ASSERT_EQ(back[0], summed_ones(n));
      ASSERT_EQ(back[kCount - 1], summed_ones(n));
    }
    comm.barrier();
  });
}

// Every rank destroys its communicator right after issuing device operations: the destruction
// runs them (as for host operations), and no stream is left waiting.
TEST_P(GpuStreamOrder, DestroyingWithOperationsOutstandingReleasesTheStream) {
  run_processes(world(), [](int) {
    use_rank_device();
    gpu::DeviceBuffer buf(kCount * 4);
    gpu::PinnedHostBuffer out(kCount * 4);
    HeldStream stream;
    gpu::memset_async(buf.data(), 0x01, kCount * 4, stream);
    {
      Communicator comm = Communicator::from_env();
      for (int i = 0; i < 4; ++i)
        (void)comm.all_reduce_async(buf.data(), buf.data(), kCount, DataType::kI32, ReduceOp::kMax,
                                    stream);
      gpu::memcpy_async(out.data(), buf.data(), kCount * 4, stream);
    }
    ASSERT_TRUE(stream.drains_within(30)) << "the stream still waits after the communicator ended";
    EXPECT_TRUE(all_equal(out, kCount, 0x01010101));
  });
}

// 2 and 4 ranks, on the IPC path and on pinned-host staging.
INSTANTIATE_TEST_SUITE_P(World, GpuStreamOrder,
                         ::testing::Values(std::tuple<int, std::string>{2, "ipc"},
                                           std::tuple<int, std::string>{2, "staging"},
                                           std::tuple<int, std::string>{4, "ipc"},
                                           std::tuple<int, std::string>{4, "staging"}),
                         path_world_name);

}  // namespace
}  // namespace chorus::testing
