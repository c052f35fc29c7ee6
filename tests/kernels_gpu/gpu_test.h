// chorus — what the GPU tests share: the fixture that skips without a device and picks this
// process's device, device buffers filled from host data, and the CPU kernels' inputs and bitwise
// comparison (tests/kernels/test_data.h), since the CPU kernels are the GPU kernels' reference.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "chorus/gpu/runtime.h"
#include "test_data.h"

namespace chorus::kernels::gpu::testing {

using chorus::kernels::testing::Buffer;
using chorus::kernels::testing::random_buffer;
using chorus::kernels::testing::same_elements;

// This process's device: CHORUS_LOCAL_RANK (set by chorus-run) modulo the device count, so that
// several ranks of the test spread over the GPUs of a host.
inline int test_device(int count) {
  const char* local_rank = std::getenv("CHORUS_LOCAL_RANK");
  return local_rank ? std::atoi(local_rank) % count : 0;
}

// Base for tests that need a device: skips with the reason when there is none.
class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const chorus::gpu::Devices devices = chorus::gpu::probe_devices();
    if (devices.count == 0) GTEST_SKIP() << "no GPU: " << devices.reason;
    device_ = test_device(devices.count);
    chorus::gpu::set_device(device_);
  }
  int device_ = 0;
};

// Device memory holding a copy of host bytes (plus the same slack), and back.
inline chorus::gpu::DeviceBuffer to_device(const std::vector<unsigned char>& host) {
  chorus::gpu::DeviceBuffer buf(host.size());
  chorus::gpu::memcpy_async(buf.data(), host.data(), host.size(), {});
  chorus::gpu::stream_synchronize({});
  return buf;
}

inline std::vector<unsigned char> to_host(const chorus::gpu::DeviceBuffer& buf) {
  std::vector<unsigned char> host(buf.bytes());
  chorus::gpu::memcpy_async(host.data(), buf.data(), host.size(), {});
  chorus::gpu::stream_synchronize({});
  return host;
}

inline void* at(const chorus::gpu::DeviceBuffer& buf, DataType dtype, size_t element) {
  return static_cast<unsigned char*>(buf.data()) + element * dtype_size(dtype);
}

}  // namespace chorus::kernels::gpu::testing
