// chorus — internal: how a CUDA/HIP error code becomes a chorus error. Plain C++ (the codes travel
// as int), so tests can check the translation without a device. Defined in runtime.cu, and in
// runtime_none.cc for builds without GPU support.
#pragma once

#include <string>
#include <string_view>

namespace chorus::gpu::detail {

// "cudaErrorMemoryAllocation (2): out of memory", from the runtime's own tables (no device needed).
std::string describe_error(int code);

// Throws GpuError: "<call>: <describe_error(code)>", kind kInvalidArgument for the runtime's
// invalid-value, invalid-device and invalid-handle codes, kSystem otherwise.
[[noreturn]] void throw_gpu_error(int code, std::string_view call);

}  // namespace chorus::gpu::detail
