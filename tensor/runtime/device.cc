// Devices: names, and whether this process can use one (chorus/tensor/device.h).
#include "chorus/tensor/device.h"

#include <charconv>

#include "backend/backend.h"
#include "chorus/error.h"
#include "chorus/gpu/runtime.h"

namespace chorus::tensor {
namespace {

const char* type_name(DeviceType type) {
  switch (type) {
    case DeviceType::kCPU:
      return "cpu";
    case DeviceType::kCUDA:
      return "cuda";
    case DeviceType::kHIP:
      return "hip";
  }
  return "unknown";
}

// The GPU runtime a device type needs.
gpu::Backend runtime_of(DeviceType type) {
  return type == DeviceType::kCUDA ? gpu::Backend::kCuda : gpu::Backend::kHip;
}

}  // namespace

Device::Device(std::string_view name) {
  const auto colon = name.find(':');
  const std::string_view kind = name.substr(0, colon);
  if (kind == "cpu") {
    type = DeviceType::kCPU;
  } else if (kind == "cuda") {
    type = DeviceType::kCUDA;
  } else if (kind == "hip") {
    type = DeviceType::kHIP;
  } else {
    throw InvalidArgument(
        detail::concat("device '", name, "': expected cpu, cuda, cuda:N, hip or hip:N"));
  }
  index = 0;
  if (colon == std::string_view::npos) return;
  const std::string_view digits = name.substr(colon + 1);
  const auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  CHORUS_ARG_CHECK(
      !digits.empty() && err == std::errc() && end == digits.data() + digits.size() && index >= 0,
      "device '", name, "': the index must be a number >= 0");
  CHORUS_ARG_CHECK(type != DeviceType::kCPU || index == 0, "device '", name,
                   "': the CPU is device cpu (cpu:0)");
}

std::string to_string(Device device) {
  if (device.is_cpu()) return "cpu";
  return detail::concat(type_name(device.type), ":", device.index);
}

int device_count(DeviceType type) {
  if (type == DeviceType::kCPU) return 1;
  if (gpu::backend() != runtime_of(type)) return 0;
  return gpu::probe_devices().count;
}

std::string device_unavailable_reason(Device device) {
  try {
    const std::string name = to_string(device);
    if (device.is_cpu())
      return device.index == 0 ? std::string() : name + ": the CPU is device cpu (cpu:0)";
    if (device.index < 0) return name + ": a negative device index";
    const gpu::Backend built = gpu::backend();
    if (built == gpu::Backend::kNone)
      return detail::concat(name, ": no device: ", gpu::probe_devices().reason);
    if (built != runtime_of(device.type))
      return detail::concat(name, ": this chorus was built for ",
                            built == gpu::Backend::kCuda ? "CUDA" : "HIP", ", not for ",
                            device.type == DeviceType::kCUDA ? "CUDA" : "HIP");
    const gpu::Devices devices = gpu::probe_devices();
    if (devices.count == 0) return detail::concat(name, ": no device: ", devices.reason);
    if (device.index >= devices.count)
      return detail::concat(name, ": no such device (", devices.count,
                            " visible: ", type_name(device.type), ":0 to ", type_name(device.type),
                            ":", devices.count - 1, ")");
    return {};
  } catch (...) {
    return "device check failed (out of memory)";
  }
}

gpu::Stream compute_stream(Device device) { return backend_for(device).compute_stream(); }

void synchronize(Device device) { backend_for(device).synchronize(); }

}  // namespace chorus::tensor
