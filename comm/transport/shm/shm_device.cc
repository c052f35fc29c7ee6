#include "transport/shm/shm_device.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "chorus/error.h"

namespace chorus::transport::shm {

std::string device_ipc_signature() {
  const gpu::Backend backend = gpu::backend();
  if (backend == gpu::Backend::kNone) return {};
  // The driver's device node: without it the runtime has no device and nothing to share.
  const char* node = backend == gpu::Backend::kCuda ? "/dev/nvidiactl" : "/dev/kfd";
  if (::access(node, F_OK) != 0) return {};
  std::string sig(gpu::to_string(backend));
  for (const char* var : {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"}) {
    const char* v = std::getenv(var);
    sig += detail::concat(";", var, "=", v != nullptr ? v : "(unset)");
  }
  // Must fit SegmentHeader::gpu_signature with its NUL; a longer one shares nothing.
  if (sig.size() >= sizeof(SegmentHeader::gpu_signature)) return {};
  return sig;
}

bool signatures_allow_ipc(std::span<const std::string> signatures, std::string* why) {
  for (size_t r = 0; r < signatures.size(); ++r) {
    if (signatures[r].empty()) {
      *why = detail::concat("rank ", r,
                            " cannot use GPU IPC (built without GPU support, or no "
                            "GPU driver)");
      return false;
    }
    if (signatures[r] != signatures[0]) {
      *why = detail::concat("rank ", r, " sees other devices than rank 0 (", signatures[r], " vs ",
                            signatures[0], "): device numbers would not match");
      return false;
    }
  }
  return true;
}

void encode(const DeviceRendezvous& d, SlotHeader* h, std::byte* payload) {
  (void)h;
  std::memcpy(payload, &d, sizeof d);
}

DeviceRendezvous decode(const SlotHeader* h, const std::byte* payload) {
  (void)h;
  DeviceRendezvous d;
  std::memcpy(&d, payload, sizeof d);
  return d;
}

}  // namespace chorus::transport::shm
