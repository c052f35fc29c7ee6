// What the tensor engine's GPU tests share: the fixture that skips without a device and picks
// this process's device, and host-side comparison of tensors.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "chorus/tensor/tensor.h"

namespace chorus::tensor::testing {

// This process's device: CHORUS_LOCAL_RANK (set by chorus-run) modulo the device count, so that
// several ranks of the test spread over the GPUs of a host.
inline Device test_device() {
  const int count = device_count(DeviceType::kCUDA);
  const char* local_rank = std::getenv("CHORUS_LOCAL_RANK");
  return Device::cuda(count > 0 && local_rank ? std::atoi(local_rank) % count : 0);
}

// Base for tests that need a device: skips with the reason when there is none.
class GpuTensorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = test_device();
    if (const std::string why = device_unavailable_reason(device_); !why.empty())
      GTEST_SKIP() << "no GPU: " << why;
  }
  Device device_;
};

// Base for the comparisons of a device with the CPU engine: on this process's GPU, or on the CPU
// itself when CHORUS_TENSOR_TEST_DEVICE=cpu (how the suite runs without a GPU: the comparisons,
// the tolerances' arithmetic and the poisoned allocations then check the CPU kernels and the
// harness, every result equal to the reference).
class DeviceComparisonTest : public GpuTensorTest {
 protected:
  void SetUp() override {
    const char* forced = std::getenv("CHORUS_TENSOR_TEST_DEVICE");
    if (forced != nullptr && std::string(forced) == "cpu") {
      device_ = Device::cpu();
      return;
    }
    GpuTensorTest::SetUp();
  }
};

}  // namespace chorus::tensor::testing
