// chorus — a stream waiting for the host: stream_wait_value() (a stream waits, on the device, until
// a word the host writes reaches a value) and the stream-capture queries around it.
//
// Two ways to wait. A stream memory operation (cuStreamWaitValue64/32, hipStreamWaitValue64) is
// executed by the device's front end and costs no SM; it belongs to the CUDA driver API, which
// chorus never links (binaries must start without a driver), so its entry point comes from the
// runtime (cudaGetDriverEntryPoint). Where a device has no stream memory operations (or
// CHORUS_GPU_STREAM_WAIT=kernel), a one-thread kernel polls the word instead, sleeping between
// polls; it holds one SM slot while it waits.
#include <string>

#include "chorus/config.h"
#include "chorus/gpu/runtime.h"
#include "error_text.h"
#include "portability.h"

#if !defined(CHORUS_GPU_HIP)
#include <cuda.h>  // driver types and constants only: nothing here links libcuda
#endif

namespace chorus::gpu {
namespace {

const StringKnob kStreamWait{"CHORUS_GPU_STREAM_WAIT", "auto",
                             "how a stream waits for a communicator's host thread: auto (stream "
                             "memory operations where the device has them), memop or kernel"};

void check(cudaError_t err, std::string_view call) {
  if (err != cudaSuccess) [[unlikely]] {
    (void)cudaGetLastError();
    detail::throw_gpu_error(static_cast<int>(err), call);
  }
}

cudaStream_t to_native(Stream s) { return static_cast<cudaStream_t>(s.native); }

// The polling fallback: one thread, a volatile load per poll (the word lives in host memory the
// CPU writes, or in device memory), and a growing sleep between polls where the ISA has one.
__global__ void wait_value_kernel(const volatile unsigned long long* flag,
                                  unsigned long long value) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  unsigned ns = 32;
#endif
  while (static_cast<long long>(*flag - value) < 0) {
#if defined(__HIP_DEVICE_COMPILE__)
    __builtin_amdgcn_s_sleep(8);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    __nanosleep(ns);
    if (ns < 2048) ns *= 2;
#endif
  }
}

void launch_wait_kernel(Stream stream, const void* flag, uint64_t value) {
  wait_value_kernel<<<1, 1, 0, to_native(stream)>>>(
      static_cast<const volatile unsigned long long*>(flag), value);
  check(cudaGetLastError(), "stream_wait_value: wait kernel launch");
}

WaitMethod configured_method() {
  const std::string v = kStreamWait.get();
  if (v == "auto" || v.empty()) return WaitMethod::kAuto;
  if (v == "memop") return WaitMethod::kMemOp;
  if (v == "kernel") return WaitMethod::kKernel;
  throw InvalidArgument("CHORUS_GPU_STREAM_WAIT must be auto, memop or kernel, got '" + v + "'");
}

#if defined(CHORUS_GPU_HIP)

bool memops_supported() {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  int can = 0;
  check(hipDeviceGetAttribute(&can, hipDeviceAttributeCanUseStreamWaitValue, device),
        "hipDeviceGetAttribute(CanUseStreamWaitValue)");
  return can != 0;
}

// Queues the wait; false when the device turns stream memory operations down. hipStreamWaitValue64
// compares (*flag & mask) >= value; the values chorus waits for grow from 1 and never come near
// 2^63, where that and the cyclic comparison differ.
bool wait_memop(Stream stream, const void* flag, uint64_t value) {
  const hipError_t err = hipStreamWaitValue64(to_native(stream), const_cast<void*>(flag), value,
                                              hipStreamWaitValueGte, ~uint64_t{0});
  if (err == hipErrorNotSupported) {
    (void)hipGetLastError();
    return false;
  }
  check(err, "hipStreamWaitValue64");
  return true;
}

#else  // CUDA

// The driver functions stream_wait_value needs, resolved once through the runtime.
struct DriverMemOps {
  using WaitValue64 = CUresult(CUDAAPI*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
  using WaitValue32 = CUresult(CUDAAPI*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  using DeviceGet = CUresult(CUDAAPI*)(CUdevice*, int);
  using DeviceGetAttribute = CUresult(CUDAAPI*)(int*, CUdevice_attribute, CUdevice);
  WaitValue64 wait64 = nullptr;
  WaitValue32 wait32 = nullptr;
  DeviceGet device_get = nullptr;
  DeviceGetAttribute device_attribute = nullptr;
};

void* driver_entry_point(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  // The ABI of CUDA 12.0: cuStreamWaitValue64 is the _v2 function declared in cuda.h.
  const cudaError_t err =
      cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status);
#else
  const cudaError_t err = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &status);
#endif
  if (err != cudaSuccess || status != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return fn;
}

const DriverMemOps& driver_mem_ops() {
  static const DriverMemOps ops = [] {
    DriverMemOps d;
    d.wait64 =
        reinterpret_cast<DriverMemOps::WaitValue64>(driver_entry_point("cuStreamWaitValue64"));
    d.wait32 =
        reinterpret_cast<DriverMemOps::WaitValue32>(driver_entry_point("cuStreamWaitValue32"));
    d.device_get = reinterpret_cast<DriverMemOps::DeviceGet>(driver_entry_point("cuDeviceGet"));
    d.device_attribute = reinterpret_cast<DriverMemOps::DeviceGetAttribute>(
        driver_entry_point("cuDeviceGetAttribute"));
    return d;
  }();
  return ops;
}

// Whether the current device takes 64-bit stream memory operations (32-bit ones come with every
// driver that has the v2 functions, CUDA >= 11.7).
bool memops64_supported() {
  const DriverMemOps& d = driver_mem_ops();
  if (!d.wait64 || !d.device_get || !d.device_attribute) return false;
  int ordinal = 0;
  check(cudaGetDevice(&ordinal), "cudaGetDevice");
  CUdevice device = 0;
  int can = 0;
  if (d.device_get(&device, ordinal) != CUDA_SUCCESS ||
      d.device_attribute(&can, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, device) !=
          CUDA_SUCCESS)
    return false;
  return can != 0;
}

bool memops_supported() {
  // Touch the runtime first: it loads the driver (and reports "no driver" as an error here).
  int ordinal = 0;
  check(cudaGetDevice(&ordinal), "cudaGetDevice");
  return driver_mem_ops().wait32 != nullptr || memops64_supported();
}

// Queues the wait; false when the driver turns stream memory operations down.
bool wait_memop(Stream stream, const void* flag, uint64_t value) {
  // A driver call on the legacy default stream acts in the thread's current context: make the
  // runtime bind the device's primary context to this thread (cudaSetDevice does since CUDA 12).
  int ordinal = 0;
  check(cudaGetDevice(&ordinal), "cudaGetDevice");
  check(cudaSetDevice(ordinal), "cudaSetDevice");
  const DriverMemOps& d = driver_mem_ops();
  const auto stream_handle = reinterpret_cast<CUstream>(stream.native);
  const auto address = reinterpret_cast<CUdeviceptr>(flag);
  const char* call = "cuStreamWaitValue64";
  CUresult r = CUDA_ERROR_NOT_SUPPORTED;
  if (memops64_supported()) {
    r = d.wait64(stream_handle, address, value, CU_STREAM_WAIT_VALUE_GEQ);
  } else if (d.wait32 != nullptr) {
    // The low word of the little-endian 64-bit value, compared cyclically.
    call = "cuStreamWaitValue32";
    r = d.wait32(stream_handle, address, static_cast<cuuint32_t>(value), CU_STREAM_WAIT_VALUE_GEQ);
  }
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_SUPPORTED) return false;
  // Driver codes are not runtime codes: report the number as the driver gave it.
  throw GpuError(r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_INVALID_HANDLE
                     ? ErrorKind::kInvalidArgument
                     : ErrorKind::kSystem,
                 chorus::detail::concat(call, ": CUDA driver error ", static_cast<int>(r)),
                 static_cast<int>(r));
}

#endif

}  // namespace

bool stream_is_capturing(Stream stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t err = cudaStreamIsCapturing(to_native(stream), &status);
  if (err == cudaErrorStreamCaptureImplicit) {
    // The legacy default stream while another stream captures in global mode: work queued on it
    // would join (and break) that capture.
    (void)cudaGetLastError();
    return true;
  }
  check(err, "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

StreamCapture::StreamCapture(Stream stream) : stream_(stream) {
  check(cudaStreamBeginCapture(to_native(stream), cudaStreamCaptureModeThreadLocal),
        "cudaStreamBeginCapture");
}

StreamCapture::~StreamCapture() {
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(to_native(stream_), &graph) != cudaSuccess) (void)cudaGetLastError();
  if (graph != nullptr && cudaGraphDestroy(graph) != cudaSuccess) (void)cudaGetLastError();
}

void set_relaxed_capture_mode() noexcept {
#if !defined(CHORUS_GPU_HIP)
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) (void)cudaGetLastError();
#endif
}

WaitMethod stream_wait_method() {
  const WaitMethod configured = configured_method();
  if (configured != WaitMethod::kAuto) return configured;
  return memops_supported() ? WaitMethod::kMemOp : WaitMethod::kKernel;
}

void stream_wait_value(Stream stream, const void* flag, uint64_t value, WaitMethod method) {
  CHORUS_ARG_CHECK(flag != nullptr && reinterpret_cast<uintptr_t>(flag) % 8 == 0,
                   "stream_wait_value: the flag address ", flag, " is not 8-byte aligned");
  // Only a choice left to chorus may fall back to the kernel.
  const bool may_fall_back =
      method == WaitMethod::kAuto && configured_method() == WaitMethod::kAuto;
  if (method == WaitMethod::kAuto) method = stream_wait_method();
  if (method == WaitMethod::kKernel) return launch_wait_kernel(stream, flag, value);
  if (memops_supported() && wait_memop(stream, flag, value)) return;
  // The attribute and the driver can disagree (stream memory operations switched off in the
  // driver); the kernel works everywhere.
  if (may_fall_back) return launch_wait_kernel(stream, flag, value);
  throw Error(ErrorKind::kSystem,
              "stream_wait_value: this device has no stream memory operations (use "
              "WaitMethod::kKernel or CHORUS_GPU_STREAM_WAIT=kernel)");
}

}  // namespace chorus::gpu
