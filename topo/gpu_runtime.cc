#include "gpu_runtime.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "chorus/error.h"
#include "chorus/gpu/runtime.h"
#include "chorus/log.h"

namespace chorus::topo {

std::string normalize_bus_id(const std::string& bus_id) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  char tail = 0;
  const int n =
      std::sscanf(bus_id.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &device, &function, &tail);
  if (n == 4 || n == 3) {
    char out[32];
    std::snprintf(out, sizeof out, "%04x:%02x:%02x.%x", domain & 0xffff, bus & 0xff, device & 0xff,
                  n == 4 ? function & 0xf : 0);
    return out;
  }
  std::string lower = bus_id;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower;
}

RuntimeGpus query_runtime_gpus() {
  const gpu::Devices devices = gpu::probe_devices();
  if (devices.count == 0) {
    CHORUS_TRACE(kLogInit, "topology: ", devices.reason, "; GPUs numbered in PCI order");
    return {};
  }
  RuntimeGpus out;
  out.runtime = gpu::backend() == gpu::Backend::kHip ? "HIP" : "CUDA";
  try {
    for (int device = 0; device < devices.count; ++device)
      out.pci_bus_ids.push_back(normalize_bus_id(gpu::device_properties(device).pci_bus_id));
  } catch (const Error& e) {
    // Discovery must not fail for want of ordinals: the PCI order is a usable numbering.
    CHORUS_WARN(kLogInit, "topology: cannot read the GPUs' PCI bus ids (", e.message(),
                "); GPUs numbered in PCI order");
    return {};
  }
  return out;
}

}  // namespace chorus::topo
