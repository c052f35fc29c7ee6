// chorus — the names of chorus/gpu/runtime.h's enums, shared by every build.
#include "chorus/gpu/runtime.h"

namespace chorus::gpu {

std::string_view to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::kNone:
      return "none";
    case Backend::kCuda:
      return "cuda";
    case Backend::kHip:
      return "hip";
  }
  return "unknown";
}

std::string_view to_string(MemoryKind kind) noexcept {
  switch (kind) {
    case MemoryKind::kHost:
      return "host";
    case MemoryKind::kPinnedHost:
      return "pinned host";
    case MemoryKind::kDevice:
      return "device";
    case MemoryKind::kManaged:
      return "managed";
  }
  return "unknown";
}

std::string_view to_string(WaitMethod method) noexcept {
  switch (method) {
    case WaitMethod::kAuto:
      return "auto";
    case WaitMethod::kMemOp:
      return "memop";
    case WaitMethod::kKernel:
      return "kernel";
  }
  return "unknown";
}

}  // namespace chorus::gpu
