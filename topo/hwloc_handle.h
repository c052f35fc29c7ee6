// chorus — an owned hwloc topology (RAII over hwloc_topology_init / hwloc_topology_destroy).
#pragma once

#include <hwloc.h>

namespace chorus::topo {

class HwlocHandle {
 public:
  // Initialised (not loaded), with the I/O filter discovery uses.
  HwlocHandle();
  ~HwlocHandle();
  HwlocHandle(const HwlocHandle&) = delete;
  HwlocHandle& operator=(const HwlocHandle&) = delete;

  hwloc_topology_t get() const { return topology_; }
  // hwloc_topology_load; throws chorus::InvalidArgument with `what` when it fails.
  void load(const char* what);

 private:
  hwloc_topology_t topology_ = nullptr;
};

}  // namespace chorus::topo
