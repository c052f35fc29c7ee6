// Which backend serves a GPU device (backend/backend.h: backend_for): one per device, made on
// first use and never destroyed (storages may outlive static destruction).
#include <atomic>
#include <mutex>

#include "backend/backend.h"
#include "device/device_backend.h"

namespace chorus::tensor {
namespace {

constexpr int kMaxDevices = 64;
std::atomic<Backend*> g_backends[2][kMaxDevices];  // [kCUDA, kHIP][index]
std::mutex g_mu;

}  // namespace

Backend& device_backend(Device device) {
  const int type = static_cast<int>(device.type) - 1;
  const bool indexed = type >= 0 && type < 2 && device.index >= 0 && device.index < kMaxDevices;
  if (indexed)
    if (Backend* b = g_backends[type][device.index].load(std::memory_order_acquire)) return *b;
  std::lock_guard lock(g_mu);
  const std::string reason = device_unavailable_reason(device);
  if (!reason.empty()) throw InvalidArgument(reason);
  CHORUS_ARG_CHECK(indexed, to_string(device), ": chorus handles devices 0 to ", kMaxDevices - 1);
  std::atomic<Backend*>& slot = g_backends[type][device.index];
  if (Backend* b = slot.load(std::memory_order_acquire)) return *b;
  Backend* made = make_device_backend(device).release();
  slot.store(made, std::memory_order_release);
  return *made;
}

}  // namespace chorus::tensor
