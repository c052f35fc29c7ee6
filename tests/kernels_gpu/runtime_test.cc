// chorus/gpu/runtime.h: the no-device and no-GPU-support answers and the error translation (on
// every machine), then devices, memory, streams and events (on a device).
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/gpu/runtime.h"
#include "error_text.h"
#include "gpu_test.h"

namespace chorus::gpu {
namespace {

bool built_with_gpu() { return backend() != Backend::kNone; }

TEST(GpuRuntime, ProbeGivesACountOrAReason) {
  const Devices d = probe_devices();
  EXPECT_GE(d.count, 0);
  if (d.count == 0)
    EXPECT_FALSE(d.reason.empty());
  else
    EXPECT_TRUE(d.reason.empty()) << d.reason;
  EXPECT_FALSE(version_string().empty());
  EXPECT_EQ(to_string(Backend::kCuda), "cuda");
  EXPECT_EQ(to_string(MemoryKind::kPinnedHost), "pinned host");
}

TEST(GpuRuntime, HostPointersAreHostMemory) {
  int on_stack = 0;
  std::vector<char> on_heap(64);
  EXPECT_EQ(pointer_info(&on_stack).kind, MemoryKind::kHost);
  EXPECT_EQ(pointer_info(on_heap.data()).device, -1);
  EXPECT_FALSE(is_device_pointer(on_heap.data()));
  EXPECT_FALSE(is_device_pointer(nullptr));
}

TEST(GpuRuntime, ErrorCodesBecomeChorusErrors) {
  if (!built_with_gpu()) GTEST_SKIP() << "built without GPU support: no runtime error table";
  // Codes shared by CUDA and HIP: 1 invalid value, 2 out of memory, 35 insufficient driver.
  const std::string oom = detail::describe_error(2);
  EXPECT_NE(
      oom.find(backend() == Backend::kCuda ? "cudaErrorMemoryAllocation" : "hipErrorOutOfMemory"),
      std::string::npos)
      << oom;
  EXPECT_NE(oom.find("(2)"), std::string::npos) << oom;
  try {
    detail::throw_gpu_error(1, "cudaSomething(42)");
    FAIL() << "did not throw";
  } catch (const GpuError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(e.code(), 1);
    EXPECT_EQ(e.message().rfind("cudaSomething(42): ", 0), 0u) << e.message();
  }
  try {
    detail::throw_gpu_error(35, "cudaMalloc");
    FAIL() << "did not throw";
  } catch (const GpuError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kSystem);
    std::string lower = e.message();
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_NE(lower.find("driver"), std::string::npos) << e.message();
  }
}

TEST(GpuRuntime, WithoutDeviceCallsThrowTheRuntimeError) {
  if (!built_with_gpu()) GTEST_SKIP() << "built without GPU support (GpuRuntimeStubs covers it)";
  if (probe_devices().count > 0) GTEST_SKIP() << "a device is present";
  EXPECT_NE(probe_devices().reason.find("no "), std::string::npos) << probe_devices().reason;
  EXPECT_THROW(DeviceBuffer(1024), GpuError);
  EXPECT_THROW(OwnedStream(), GpuError);
  EXPECT_THROW(Event(), GpuError);
  EXPECT_NO_THROW(DeviceBuffer(0)) << "0 bytes asks the runtime for nothing";
}

TEST(GpuRuntimeStubs, SayBuiltWithoutGpuSupport) {
  if (built_with_gpu()) GTEST_SKIP() << "built with " << to_string(backend());
  EXPECT_EQ(probe_devices().count, 0);
  EXPECT_NE(probe_devices().reason.find("built without GPU support"), std::string::npos);
  try {
    DeviceBuffer buf(16);
    FAIL() << "DeviceBuffer did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built without GPU support"), std::string::npos);
  }
  EXPECT_THROW(OwnedStream(), Error);
  EXPECT_THROW(Event(), Error);
  EXPECT_THROW(set_device(0), Error);
  EXPECT_THROW(ipc_mem_handle(nullptr), Error);
  EXPECT_NO_THROW(DeviceBuffer(0));
}

// ---- on a device --------------------------------------------------------------------------------

using kernels::gpu::testing::DeviceTest;

class GpuRuntimeDevice : public DeviceTest {};

TEST_F(GpuRuntimeDevice, DevicePropertiesAndCurrentDevice) {
  EXPECT_EQ(current_device(), device_);
  const DeviceProperties p = device_properties(device_);
  EXPECT_FALSE(p.name.empty());
  EXPECT_GT(p.total_memory, size_t{0});
  EXPECT_GT(p.multiprocessors, 0);
  EXPECT_NE(p.pci_bus_id.find(':'), std::string::npos) << p.pci_bus_id;
  EXPECT_THROW(set_device(probe_devices().count), GpuError);
  try {
    set_device(probe_devices().count);
  } catch (const GpuError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
  }
  set_device(device_);
}

TEST_F(GpuRuntimeDevice, MemoryRoundTripAndPointerKinds) {
  DeviceBuffer buf(1 << 20);
  const PointerInfo info = pointer_info(buf.data());
  EXPECT_EQ(info.kind, MemoryKind::kDevice);
  EXPECT_EQ(info.device, device_);
  EXPECT_TRUE(is_device_pointer(static_cast<char*>(buf.data()) + 100));
  std::vector<int> host(1 << 18), back(1 << 18, 0);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<int>(i * 7);
  OwnedStream stream;
  memcpy_async(buf.data(), host.data(), buf.bytes(), stream);
  memcpy_async(back.data(), buf.data(), buf.bytes(), stream);
  stream_synchronize(stream);
  EXPECT_TRUE(stream_query(stream));
  EXPECT_EQ(host, back);
  memset_async(buf.data(), 0, buf.bytes(), stream);
  memcpy_async(back.data(), buf.data(), buf.bytes(), stream);
  stream_synchronize(stream);
  EXPECT_EQ(back, std::vector<int>(1 << 18, 0));
  DeviceBuffer moved = std::move(buf);
  EXPECT_EQ(buf.data(), nullptr);
  EXPECT_NE(moved.data(), nullptr);
}

TEST_F(GpuRuntimeDevice, EventsOrderTwoStreams) {
  // stream a fills the buffer; stream b waits on a's event before copying it out.
  constexpr size_t kBytes = 64 << 20;
  DeviceBuffer src(kBytes), mid(kBytes);
  std::vector<unsigned char> pattern(kBytes), back(kBytes);
  for (size_t i = 0; i < kBytes; ++i) pattern[i] = static_cast<unsigned char>(i % 251);
  OwnedStream a, b;
  Event start({.timing = true}), filled({.timing = true});
  start.record(a);
  memcpy_async(src.data(), pattern.data(), kBytes, a);
  memcpy_async(mid.data(), src.data(), kBytes, a);
  filled.record(a);
  stream_wait(b, filled);
  memcpy_async(back.data(), mid.data(), kBytes, b);
  stream_synchronize(b);
  EXPECT_TRUE(filled.query());
  EXPECT_EQ(0, std::memcmp(back.data(), pattern.data(), kBytes));
  EXPECT_GT(elapsed_ms(start, filled), 0.0f);
  filled.synchronize();
  EXPECT_THROW(Event({.timing = true, .interprocess = true}), InvalidArgument);
}

TEST_F(GpuRuntimeDevice, PeerAccessWhenThereArePeers) {
  const int count = probe_devices().count;
  if (count < 2) GTEST_SKIP() << "one device: no peer";
  const int peer = (device_ + 1) % count;
  if (!can_access_peer(device_, peer))
    GTEST_SKIP() << "devices " << device_ << " and " << peer << " cannot access each other";
  enable_peer_access(peer);
  enable_peer_access(peer);  // already enabled: not an error
  set_device(peer);
  DeviceBuffer remote(4096);
  set_device(device_);
  DeviceBuffer local(4096);
  memset_async(remote.data(), 0x5a, 4096, {});
  memcpy_async(local.data(), remote.data(), 4096, {});
  std::vector<unsigned char> back(4096);
  memcpy_async(back.data(), local.data(), 4096, {});
  stream_synchronize({});
  EXPECT_EQ(back, std::vector<unsigned char>(4096, 0x5a));
  EXPECT_EQ(pointer_info(remote.data()).device, peer);
}

}  // namespace
}  // namespace chorus::gpu
