// Calls that must be refused on the caller's thread (host and device memory mixed in one call,
// a second device, a stream being captured into a graph), leaving the communicator usable; and a
// peer killed in the middle of device operations: PeerFailure, and the stream released.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "error_helpers.h"
#include "gpu_world.h"

namespace chorus::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kCount = 4099;

// The communicator still works: a device all-reduce of ones gives the world size.
void expect_usable(Communicator& comm, const gpu::DeviceBuffer& buf) {
  std::vector<float> ones(kCount, 1.0f);
  gpu::memcpy_async(buf.data(), ones.data(), kCount * 4, {});
  comm.all_reduce(buf.data(), buf.data(), kCount, DataType::kF32, ReduceOp::kSum);
  gpu::memcpy_async(ones.data(), buf.data(), kCount * 4, {});
  gpu::stream_synchronize({});
  EXPECT_EQ(ones[0], static_cast<float>(comm.size()));
  EXPECT_EQ(ones[kCount - 1], static_cast<float>(comm.size()));
}

// Without a device (or without GPU support) the stream forms still take host buffers: on the
// default stream they are the plain asynchronous calls; another stream cannot exist here and is
// refused.
TEST(GpuNoDevice, StreamFormsTakeHostBuffers) {
  if (devices_seen_by_a_child().count > 0) GTEST_SKIP() << "a device is present";
  run_ranks(2, [](Communicator& comm) {
    std::vector<int32_t> v(1001, comm.rank() + 1);
    comm.all_reduce_async(v.data(), v.data(), v.size(), DataType::kI32, ReduceOp::kSum, {}).wait();
    EXPECT_EQ(v[0], 3);
    EXPECT_EQ(v[1000], 3);
    std::vector<int32_t> all(2 * v.size());
    comm.all_gather_async(v.data(), all.data(), v.size(), DataType::kI32, gpu::Stream{}).wait();
    EXPECT_EQ(all[1500], 3);
    comm.barrier_async(gpu::Stream{}).wait();
    int dummy = 0;
    auto e = error_of([&] {
      (void)comm.all_reduce_async(v.data(), v.data(), v.size(), DataType::kI32, ReduceOp::kSum,
                                  gpu::Stream{&dummy});
    });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->kind(), ErrorKind::kInvalidArgument);
    EXPECT_TRUE(contains(e->what(), "no GPU")) << e->what();
    comm.all_reduce(v.data(), v.data(), v.size(), DataType::kI32, ReduceOp::kSum);
    EXPECT_EQ(v[0], 6);
  });
}

class GpuErrors : public GpuWorld {};

TEST_F(GpuErrors, HostAndDeviceMemoryInOneCallAreRefused) {
  run_ranks(2, [](Communicator& comm) {
    use_rank_device();
    gpu::DeviceBuffer dev(kCount * 4 * 2);
    std::vector<float> host(kCount * 2, 1.0f);
    gpu::OwnedStream stream;
    auto e = error_of(
        [&] { comm.all_reduce(host.data(), dev.data(), kCount, DataType::kF32, ReduceOp::kSum); });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->kind(), ErrorKind::kInvalidArgument);
    EXPECT_TRUE(contains(e->what(), "send is host memory")) << e->what();
    EXPECT_TRUE(contains(e->what(), "recv is device memory")) << e->what();
    e = error_of([&] {
      (void)comm.all_gather_async(dev.data(), host.data(), kCount, DataType::kF32, stream);
    });
    ASSERT_TRUE(e);
    EXPECT_TRUE(contains(e->what(), "all_gather")) << e->what();
    EXPECT_TRUE(contains(e->what(), "send is device memory")) << e->what();
    e = error_of([&] {
      comm.send_recv(dev.data(), kCount, 1 - comm.rank(), host.data(), kCount, 1 - comm.rank(),
                     DataType::kF32);
    });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->kind(), ErrorKind::kInvalidArgument);
    // Nothing was queued and no peer was involved.
    expect_usable(comm, dev);
  });
}

TEST_F(GpuErrors, ASecondDeviceIsRefused) {
  if (devices_seen_by_a_child().count < 2) GTEST_SKIP() << "one device";
  run_ranks(2, [](Communicator& comm) {
    const int mine = use_rank_device();
    gpu::DeviceBuffer buf(kCount * 4);
    expect_usable(comm, buf);  // fixes the communicator's device
    const int other = (mine + 1) % gpu::probe_devices().count;
    gpu::set_device(other);
    gpu::DeviceBuffer elsewhere(kCount * 4);
    gpu::set_device(mine);
    auto e = error_of([&] {
      comm.all_reduce(elsewhere.data(), elsewhere.data(), kCount, DataType::kF32, ReduceOp::kSum);
    });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->kind(), ErrorKind::kInvalidArgument);
    EXPECT_TRUE(contains(e->what(), "works with device " + std::to_string(mine))) << e->what();
    e = error_of([&] {
      comm.all_reduce(buf.data(), elsewhere.data(), kCount, DataType::kF32, ReduceOp::kSum);
    });
    ASSERT_TRUE(e);
    EXPECT_TRUE(contains(e->what(), "one device")) << e->what();
    expect_usable(comm, buf);
  });
}

TEST_F(GpuErrors, AStreamBeingCapturedIsRefused) {
  run_ranks(2, [](Communicator& comm) {
    use_rank_device();
    gpu::DeviceBuffer buf(kCount * 4);
    gpu::OwnedStream stream;
    {
      gpu::StreamCapture capture(stream);
      auto e = error_of([&] {
        (void)comm.all_reduce_async(buf.data(), buf.data(), kCount, DataType::kF32, ReduceOp::kSum,
                                    stream);
      });
      ASSERT_TRUE(e);
      EXPECT_EQ(e->kind(), ErrorKind::kInvalidArgument);
      EXPECT_TRUE(contains(e->what(), "captured")) << e->what();
    }
    expect_usable(comm, buf);
  });
}

// Rank 1 is killed right after issuing its third all-reduce (its progress thread may be in the
// middle of it). Rank 0's operations fail with PeerFailure naming rank 1, and its stream, with
// later work queued behind those operations, runs to the end.
TEST_F(GpuErrors, PeerKilledMidOperationFailsTheWorkAndReleasesTheStream) {
  RunOptions options;
  options.may_fail = {1};
  run_ranks(
      2,
      [](Communicator& comm) {
        use_rank_device();
        constexpr size_t kBig = size_t{4} << 20;  // 16 MiB of f32
        gpu::DeviceBuffer buf(kBig * 4);
        gpu::PinnedHostBuffer out(4096);
        HeldStream stream;
        gpu::memset_async(buf.data(), 0, kBig * 4, stream);
        std::vector<Work> works;
        for (int i = 0; i < 8; ++i) {
          works.push_back(comm.all_reduce_async(buf.data(), buf.data(), kBig, DataType::kF32,
                                                ReduceOp::kSum, stream));
          if (comm.rank() == 1 && i == 2) ::kill(::getpid(), SIGKILL);
        }
        gpu::memcpy_async(out.data(), buf.data(), 4096, stream);  // later work
        const auto start = Clock::now();
        std::optional<Error> first;
        for (Work& w : works) {
          try {
            w.wait();
          } catch (const Error& e) {
            if (!first) first = e;
          }
        }
        ASSERT_TRUE(first) << "no operation failed although rank 1 was killed";
        EXPECT_EQ(first->kind(), ErrorKind::kPeerFailure) << first->what();
        EXPECT_TRUE(contains(first->what(), "rank 1")) << first->what();
        EXPECT_LT(Clock::now() - start, std::chrono::seconds(20));
        EXPECT_TRUE(stream.drains_within(20)) << "the stream is still held after the failure";
        // The communicator is broken: later calls fail at once, and still release their stream.
        auto later = error_of([&] {
          comm.all_reduce_async(buf.data(), buf.data(), kBig, DataType::kF32, ReduceOp::kSum,
                                stream)
              .wait();
        });
        ASSERT_TRUE(later);
        EXPECT_TRUE(contains(later->what(), "unusable")) << later->what();
        EXPECT_TRUE(stream.drains_within(20));
      },
      options);
}

}  // namespace
}  // namespace chorus::testing
