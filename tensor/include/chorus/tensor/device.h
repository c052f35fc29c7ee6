// chorus::tensor — where a tensor's bytes live: "cpu", "cuda:N" or "hip:N".
//
// A tensor's storage lives on one device, and every op runs on the device of its inputs (all of
// them on one device, else InvalidArgument naming the op and both devices). The CPU is always
// there; a GPU device is usable when this chorus was built with its runtime and the device exists
// (device_available() says why not: "built without GPU support", "no CUDA driver ..."), and any
// use of one that is not throws InvalidArgument with that reason.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "chorus/gpu/runtime.h"

namespace chorus::tensor {

enum class DeviceType : uint8_t { kCPU = 0, kCUDA, kHIP };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // device ordinal; always 0 for the CPU

  constexpr Device() = default;
  constexpr Device(DeviceType type_, int index_) : type(type_), index(index_) {}
  // Parses "cpu", "cuda", "cuda:1", "hip:0" ("cuda" is "cuda:0"); InvalidArgument otherwise.
  // Implicit, so that a name works wherever a Device does: t.to("cuda:0").
  Device(std::string_view name);
  Device(const char* name) : Device(std::string_view(name)) {}
  Device(const std::string& name) : Device(std::string_view(name)) {}

  static constexpr Device cpu() { return Device{}; }
  static constexpr Device cuda(int index = 0) { return Device{DeviceType::kCUDA, index}; }
  constexpr bool is_cpu() const { return type == DeviceType::kCPU; }
  friend constexpr bool operator==(Device a, Device b) = default;
};

// "cpu", "cuda:1", "hip:0".
std::string to_string(Device device);

// Empty when `device` can hold tensors in this process, else why not ("cuda:0: no device: built
// without GPU support", "cuda:2: only 1 CUDA device (cuda:0)", ...). Never throws.
std::string device_unavailable_reason(Device device);
inline bool device_available(Device device) { return device_unavailable_reason(device).empty(); }

// The GPU devices of this process's GPU runtime as tensor devices: cuda:0 ... (or hip:0 ...).
// Empty without a device or without GPU support.
int device_count(DeviceType type);

// The stream every kernel and copy the engine issues for `device` runs on, in issue order (one
// per device per process): order other device work against the engine's with chorus::gpu::Event
// on it (a Communicator's stream-ordered call can take it directly). The default stream for the
// CPU. InvalidArgument for a device this process cannot use.
gpu::Stream compute_stream(Device device);
// Returns once every kernel and copy the engine queued on `device` has finished (nothing to wait
// for on the CPU).
void synchronize(Device device);

}  // namespace chorus::tensor
