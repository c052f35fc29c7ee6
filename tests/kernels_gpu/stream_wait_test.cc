// Pinned host memory, stream capture queries and stream_wait_value(): the stubs and the no-device
// answers on every machine; on a device, a stream held by a flag in mapped pinned memory until
// the host writes it, with stream memory operations and with the polling kernel.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <thread>
#include <vector>

#include "chorus/gpu/runtime.h"
#include "gpu_test.h"

namespace chorus::gpu {
namespace {

using Clock = std::chrono::steady_clock;
using kernels::gpu::testing::DeviceTest;

bool built_with_gpu() { return backend() != Backend::kNone; }

}  // namespace

// Test names and failure messages print the method by name.
void PrintTo(WaitMethod method, std::ostream* os) { *os << to_string(method); }

namespace {

// Polls the stream for up to `seconds`; a test never blocks forever on a held stream.
bool drains_within(Stream stream, int seconds) {
  const auto deadline = Clock::now() + std::chrono::seconds(seconds);
  while (Clock::now() < deadline) {
    if (stream_query(stream)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

void store(const PinnedHostBuffer& flag, uint64_t value) {
  __atomic_store_n(static_cast<uint64_t*>(flag.data()), value, __ATOMIC_RELEASE);
}

// Releases every wait on `flag` when a test leaves early, before the flag's memory is freed.
struct ReleaseAtEnd {
  const PinnedHostBuffer& flag;
  ~ReleaseAtEnd() { store(flag, uint64_t{1} << 20); }
};

TEST(GpuStreamWaitNames, Names) {
  EXPECT_EQ(to_string(WaitMethod::kAuto), "auto");
  EXPECT_EQ(to_string(WaitMethod::kMemOp), "memop");
  EXPECT_EQ(to_string(WaitMethod::kKernel), "kernel");
}

TEST(GpuStreamWaitStubs, SayBuiltWithoutGpuSupport) {
  if (built_with_gpu()) GTEST_SKIP() << "built with " << to_string(backend());
  EXPECT_NO_THROW(PinnedHostBuffer(0));
  try {
    PinnedHostBuffer buf(64, true);
    FAIL() << "PinnedHostBuffer did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built without GPU support"), std::string::npos);
  }
  uint64_t word = 0;
  EXPECT_THROW(stream_wait_value({}, &word, 1), Error);
  EXPECT_THROW(stream_is_capturing({}), Error);
  EXPECT_THROW(StreamCapture{Stream{}}, Error);
  EXPECT_NO_THROW(set_relaxed_capture_mode());
}

TEST(GpuStreamWait, WithoutDeviceCallsThrowTheRuntimeError) {
  if (!built_with_gpu()) GTEST_SKIP() << "built without GPU support (the stubs are tested above)";
  if (probe_devices().count > 0) GTEST_SKIP() << "a device is present";
  EXPECT_THROW(PinnedHostBuffer(1024), GpuError);
  EXPECT_THROW(PinnedHostBuffer(64, true), GpuError);
  EXPECT_NO_THROW(PinnedHostBuffer(0));
  EXPECT_THROW(stream_wait_method(), GpuError);
  EXPECT_NO_THROW(set_relaxed_capture_mode());
}

// ---- on a device --------------------------------------------------------------------------------

class GpuPinned : public DeviceTest {};

TEST_F(GpuPinned, MappedBufferRoundTrip) {
  PinnedHostBuffer plain(1 << 20);
  EXPECT_EQ(plain.device_pointer(), nullptr);
  EXPECT_EQ(pointer_info(plain.data()).kind, MemoryKind::kPinnedHost);
  PinnedHostBuffer mapped(4096, true);
  ASSERT_NE(mapped.device_pointer(), nullptr);
  std::memset(mapped.data(), 0x3c, 4096);
  DeviceBuffer dev(4096);
  OwnedStream stream;
  // Through the device-side address of the mapped memory, and back into the plain buffer.
  memcpy_async(dev.data(), mapped.device_pointer(), 4096, stream);
  memcpy_async(plain.data(), dev.data(), 4096, stream);
  stream_synchronize(stream);
  EXPECT_EQ(std::memcmp(plain.data(), mapped.data(), 4096), 0);
  PinnedHostBuffer moved = std::move(mapped);
  EXPECT_EQ(mapped.data(), nullptr);
  EXPECT_EQ(moved.bytes(), 4096u);
}

TEST_F(GpuPinned, CaptureIsSeen) {
  OwnedStream stream;
  EXPECT_FALSE(stream_is_capturing(stream));
  {
    StreamCapture capture(stream);
    EXPECT_TRUE(stream_is_capturing(stream));
  }
  EXPECT_FALSE(stream_is_capturing(stream));
  EXPECT_TRUE(drains_within(stream, 10));
}

class GpuStreamWaitDevice : public DeviceTest, public ::testing::WithParamInterface<WaitMethod> {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped()) return;
    if (GetParam() == WaitMethod::kMemOp && stream_wait_method() != WaitMethod::kMemOp)
      GTEST_SKIP() << "this device has no stream memory operations";
  }
};

TEST_P(GpuStreamWaitDevice, StreamWaitsForTheHostWithoutBlockingIt) {
  PinnedHostBuffer flag(64, true);
  store(flag, 0);
  constexpr size_t kBytes = 1 << 20;
  DeviceBuffer dev(kBytes);
  PinnedHostBuffer out(kBytes);
  std::memset(out.data(), 0, kBytes);
  OwnedStream stream;
  const ReleaseAtEnd release{flag};  // destroyed first: nothing is freed under a held stream
  const auto t0 = Clock::now();
  stream_wait_value(stream, flag.device_pointer(), 1, GetParam());
  memset_async(dev.data(), 0x77, kBytes, stream);
  memcpy_async(out.data(), dev.data(), kBytes, stream);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(1)) << "queuing the wait blocked the host";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(stream_query(stream)) << "the stream ran past an unreached flag";
  EXPECT_EQ(static_cast<unsigned char*>(out.data())[0], 0);
  store(flag, 1);
  ASSERT_TRUE(drains_within(stream, 10)) << "the stream did not see the flag";
  const auto* bytes = static_cast<const unsigned char*>(out.data());
  EXPECT_EQ(bytes[0], 0x77);
  EXPECT_EQ(bytes[kBytes - 1], 0x77);
}

TEST_P(GpuStreamWaitDevice, ReachedValuesDoNotHoldAndLaterValuesReleaseEarlierWaits) {
  PinnedHostBuffer flag(64, true);
  store(flag, 5);
  OwnedStream a, b;
  const ReleaseAtEnd release{flag};
  stream_wait_value(a, flag.device_pointer(), 3, GetParam());  // already reached
  EXPECT_TRUE(drains_within(a, 10));
  stream_wait_value(a, flag.device_pointer(), 6, GetParam());
  stream_wait_value(b, flag.device_pointer(), 7, GetParam());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(stream_query(a));
  EXPECT_FALSE(stream_query(b));
  store(flag, 7);  // one store releases both
  EXPECT_TRUE(drains_within(a, 10));
  EXPECT_TRUE(drains_within(b, 10));
}

TEST_P(GpuStreamWaitDevice, ManyWaitsReleasedOneByOne) {
  PinnedHostBuffer flag(64, true);
  store(flag, 0);
  OwnedStream stream;
  Event reached[8];
  const ReleaseAtEnd release{flag};
  for (uint64_t v = 1; v <= 8; ++v) {
    stream_wait_value(stream, flag.device_pointer(), v, GetParam());
    reached[v - 1].record(stream);
  }
  for (uint64_t v = 1; v <= 8; ++v) {
    store(flag, v);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!reached[v - 1].query() && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    ASSERT_TRUE(reached[v - 1].query()) << "wait for " << v;
    if (v < 8) {
      EXPECT_FALSE(reached[v].query()) << "wait for " << v + 1 << " passed early";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Methods, GpuStreamWaitDevice,
                         ::testing::Values(WaitMethod::kMemOp, WaitMethod::kKernel),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace chorus::gpu
