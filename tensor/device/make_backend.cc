// A build without the CUDA backend: GPU devices get memory, transfers and copies, no kernels.
#include "device/device_backend.h"

namespace chorus::tensor {

std::unique_ptr<Backend> make_device_backend(Device device) {
  return std::make_unique<DeviceBackend>(device);
}

}  // namespace chorus::tensor
