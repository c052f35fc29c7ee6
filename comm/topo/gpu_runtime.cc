#include "gpu_runtime.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <memory>

#include "chorus/log.h"

namespace chorus::topo {
namespace {

struct DlClose {
  void operator()(void* handle) const { ::dlclose(handle); }
};
using Library = std::unique_ptr<void, DlClose>;

Library open_library(const char* name) { return Library(::dlopen(name, RTLD_NOW | RTLD_LOCAL)); }

template <class Fn>
Fn symbol(const Library& lib, const char* name) {
  return reinterpret_cast<Fn>(::dlsym(lib.get(), name));
}

// The CUDA driver API (libcuda ships with the driver; the toolkit's libcudart is not needed).
std::vector<std::string> cuda_bus_ids() {
  Library lib = open_library("libcuda.so.1");
  if (!lib) return {};
  using Init = int (*)(unsigned);
  using Count = int (*)(int*);
  using Get = int (*)(int*, int);
  using BusId = int (*)(char*, int, int);
  auto init = symbol<Init>(lib, "cuInit");
  auto count = symbol<Count>(lib, "cuDeviceGetCount");
  auto get = symbol<Get>(lib, "cuDeviceGet");
  auto bus_id = symbol<BusId>(lib, "cuDeviceGetPCIBusId");
  int n = 0;
  if (!init || !count || !get || !bus_id || init(0) != 0 || count(&n) != 0) return {};
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    int device = 0;
    char id[32] = {};
    if (get(&device, i) != 0 || bus_id(id, sizeof id, device) != 0) return {};
    out.push_back(normalize_bus_id(id));
  }
  return out;
}

std::vector<std::string> hip_bus_ids() {
  Library lib = open_library("libamdhip64.so");
  if (!lib) return {};
  using Count = int (*)(int*);
  using BusId = int (*)(char*, int, int);
  auto count = symbol<Count>(lib, "hipGetDeviceCount");
  auto bus_id = symbol<BusId>(lib, "hipDeviceGetPCIBusId");
  int n = 0;
  if (!count || !bus_id || count(&n) != 0) return {};
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    char id[32] = {};
    if (bus_id(id, sizeof id, i) != 0) return {};
    out.push_back(normalize_bus_id(id));
  }
  return out;
}

}  // namespace

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
  if (std::vector<std::string> ids = cuda_bus_ids(); !ids.empty()) return {"CUDA", std::move(ids)};
  if (std::vector<std::string> ids = hip_bus_ids(); !ids.empty()) return {"HIP", std::move(ids)};
  CHORUS_TRACE(kLogInit, "topology: no CUDA or HIP runtime answered; GPUs numbered in PCI order");
  return {};
}

}  // namespace chorus::topo
