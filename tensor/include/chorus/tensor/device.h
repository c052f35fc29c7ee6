// chorus::tensor — where a tensor's bytes live.
//
// The device is a real field from day one: storage allocation, copies and every op dispatch on
// it. Only the CPU is built today; CUDA and HIP storage arrive with the GPU issue, and until then
// asking for them throws InvalidArgument rather than silently using host memory.
#pragma once

#include <cstdint>
#include <string>

namespace chorus::tensor {

enum class DeviceType : uint8_t { kCPU = 0, kCUDA, kHIP };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // device ordinal; always 0 for the CPU

  static constexpr Device cpu() { return Device{}; }
  constexpr bool is_cpu() const { return type == DeviceType::kCPU; }
  friend constexpr bool operator==(Device a, Device b) = default;
};

// "cpu", "cuda:1", "hip:0".
std::string to_string(Device device);

}  // namespace chorus::tensor
