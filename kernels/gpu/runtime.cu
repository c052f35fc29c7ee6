// chorus — chorus/gpu/runtime.h over the CUDA or HIP runtime (one source, see portability.h).
//
// Every runtime call goes through check(), which turns a failure into GpuError with the call, the
// runtime's error name, code and text. The runtime is linked (cudart static or libamdhip64), never
// the driver: the runtime loads the driver when first used, so binaries start on machines without
// one and probe_devices() reports the runtime's "insufficient driver" as "no device".
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

#include "chorus/gpu/runtime.h"
#include "chorus/log.h"
#include "error_text.h"
#include "portability.h"

#if !defined(CHORUS_GPU_HIP)
#include <cuda.h>  // driver types and constants only: nothing here links libcuda
#endif

namespace chorus::gpu {
namespace detail {

std::string describe_error(int code) {
  const auto err = static_cast<cudaError_t>(code);
  const char* name = cudaGetErrorName(err);
  const char* text = cudaGetErrorString(err);
  return chorus::detail::concat(name ? name : "unknown error", " (", code,
                                "): ", text ? text : "no description");
}

void throw_gpu_error(int code, std::string_view call) {
  const auto err = static_cast<cudaError_t>(code);
  const bool bad_argument = err == cudaErrorInvalidValue || err == cudaErrorInvalidDevice ||
                            err == cudaErrorInvalidResourceHandle;
  throw GpuError(bad_argument ? ErrorKind::kInvalidArgument : ErrorKind::kSystem,
                 chorus::detail::concat(call, ": ", describe_error(code)), code);
}

}  // namespace detail

namespace {

void check(cudaError_t err, std::string_view call) {
  if (err != cudaSuccess) [[unlikely]] {
    (void)cudaGetLastError();  // a non-sticky error must not resurface at the next launch check
    detail::throw_gpu_error(static_cast<int>(err), call);
  }
}

// For destructors: report instead of throwing.
void warn_if_failed(cudaError_t err, const char* call) noexcept {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();
  try {
    CHORUS_WARN(kLogInit, call, " failed: ", detail::describe_error(static_cast<int>(err)));
  } catch (...) {
  }
}

cudaStream_t to_native(Stream s) { return static_cast<cudaStream_t>(s.native); }
cudaEvent_t native_event(const Event& e) { return static_cast<cudaEvent_t>(e.native()); }

}  // namespace

Backend backend() noexcept {
#if defined(CHORUS_GPU_HIP)
  return Backend::kHip;
#else
  return Backend::kCuda;
#endif
}

// ---- devices ------------------------------------------------------------------------------------

Devices probe_devices() noexcept {
  // The answer cannot change within a process (the runtime reads the visible devices once).
  static const Devices devices = []() noexcept {
    Devices d;
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    (void)cudaGetLastError();
    if (err == cudaSuccess && count > 0) {
      d.count = count;
      return d;
    }
    try {
      if (err == cudaErrorInsufficientDriver)
        d.reason = std::string("no " CHORUS_GPU_RUNTIME_NAME " driver on this machine: ") +
                   detail::describe_error(static_cast<int>(err));
      else if (err == cudaErrorNoDevice || err == cudaSuccess)
        d.reason = "no " CHORUS_GPU_RUNTIME_NAME " device visible to this process";
      else
        d.reason = std::string("no usable " CHORUS_GPU_RUNTIME_NAME " device: ") +
                   detail::describe_error(static_cast<int>(err));
    } catch (...) {
      d.reason = "no device";
    }
    return d;
  }();
  return devices;
}

std::string version_string() {
  int runtime = 0;
  int driver = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  (void)cudaDriverGetVersion(&driver);  // 0 when there is no driver
  (void)cudaGetLastError();
  const auto format = [](int v) {
#if defined(CHORUS_GPU_HIP)
    return chorus::detail::concat(v / 10000000, ".", (v / 100000) % 100);  // major*1e7 + minor*1e5
#else
    return chorus::detail::concat(v / 1000, ".", (v % 1000) / 10);  // major*1000 + minor*10
#endif
  };
  return chorus::detail::concat(CHORUS_GPU_RUNTIME_NAME " runtime ", format(runtime), ", driver ",
                                driver == 0 ? std::string("none") : format(driver));
}

int current_device() {
  int device = -1;
  check(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

void set_device(int device) {
  check(cudaSetDevice(device), chorus::detail::concat("cudaSetDevice(", device, ")"));
}

DeviceProperties device_properties(int device) {
  cudaDeviceProp prop;
  std::memset(&prop, 0, sizeof(prop));
  check(cudaGetDeviceProperties(&prop, device),
        chorus::detail::concat("cudaGetDeviceProperties(", device, ")"));
  char bus_id[32] = {};
  check(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device),
        chorus::detail::concat("cudaDeviceGetPCIBusId(", device, ")"));
  DeviceProperties p;
  p.name = prop.name;
  p.pci_bus_id = bus_id;
  p.total_memory = prop.totalGlobalMem;
  p.multiprocessors = prop.multiProcessorCount;
  p.major = prop.major;
  p.minor = prop.minor;
  return p;
}

bool can_access_peer(int device, int peer) {
  int can = 0;
  check(cudaDeviceCanAccessPeer(&can, device, peer),
        chorus::detail::concat("cudaDeviceCanAccessPeer(", device, ", ", peer, ")"));
  return can != 0;
}

void enable_peer_access(int peer) {
  const cudaError_t err = cudaDeviceEnablePeerAccess(peer, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    return;
  }
  check(err, chorus::detail::concat("cudaDeviceEnablePeerAccess(", peer, ")"));
}

void device_synchronize() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

// ---- memory -------------------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  check(cudaMalloc(&data_, bytes), chorus::detail::concat("cudaMalloc(", bytes, " bytes)"));
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    DeviceBuffer old(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) warn_if_failed(cudaFree(data_), "cudaFree");
}

void DeviceBuffer::leak() noexcept {
  data_ = nullptr;
  bytes_ = 0;
}

PinnedHostBuffer::PinnedHostBuffer(size_t bytes, bool mapped) : bytes_(bytes) {
  if (bytes == 0) return;
    // Portable: every device may use it. HIP maps host memory coherently only when asked, which a
    // kernel polling a flag needs.
#if defined(CHORUS_GPU_HIP)
  const unsigned flags =
      hipHostMallocPortable | (mapped ? hipHostMallocMapped | hipHostMallocCoherent : 0u);
#else
  const unsigned flags = cudaHostAllocPortable | (mapped ? cudaHostAllocMapped : 0u);
#endif
  check(cudaHostAlloc(&data_, bytes, flags),
        chorus::detail::concat("cudaHostAlloc(", bytes, " bytes)"));
  if (!mapped) return;
  const cudaError_t err = cudaHostGetDevicePointer(&device_, data_, 0);
  if (err != cudaSuccess) {
    warn_if_failed(cudaFreeHost(data_), "cudaFreeHost");
    data_ = nullptr;
    check(err, "cudaHostGetDevicePointer");
  }
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      device_(std::exchange(other.device_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    PinnedHostBuffer old(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    device_ = std::exchange(other.device_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

PinnedHostBuffer::~PinnedHostBuffer() {
  if (data_) warn_if_failed(cudaFreeHost(data_), "cudaFreeHost");
}

void PinnedHostBuffer::leak() noexcept {
  data_ = nullptr;
  device_ = nullptr;
  bytes_ = 0;
}

PointerInfo pointer_info(const void* ptr) {
  PointerInfo info;
  if (ptr == nullptr || probe_devices().count == 0) return info;
  cudaPointerAttributes attr;
  std::memset(&attr, 0, sizeof(attr));
  const cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err == cudaErrorInvalidValue) {
    // Older runtimes (HIP 5, CUDA < 11) answer this for memory they do not know: plain host memory.
    (void)cudaGetLastError();
    return info;
  }
  check(err, "cudaPointerGetAttributes");
  switch (CHORUS_GPU_POINTER_TYPE(attr)) {
    case cudaMemoryTypeDevice:
      info.kind = MemoryKind::kDevice;
      info.device = attr.device;
      break;
    case cudaMemoryTypeManaged:
      info.kind = MemoryKind::kManaged;
      info.device = attr.device;
      break;
    case cudaMemoryTypeHost:
      info.kind = MemoryKind::kPinnedHost;
      break;
    default:  // unregistered host memory (and array types, which chorus never hands out)
      break;
  }
  return info;
}

bool is_device_pointer(const void* ptr) {
  const MemoryKind kind = pointer_info(ptr).kind;
  return kind == MemoryKind::kDevice || kind == MemoryKind::kManaged;
}

// ---- streams ------------------------------------------------------------------------------------

OwnedStream::OwnedStream(bool non_blocking) {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault),
        "cudaStreamCreateWithFlags");
  native_ = s;
}

OwnedStream::OwnedStream(OwnedStream&& other) noexcept
    : native_(std::exchange(other.native_, nullptr)) {}

OwnedStream& OwnedStream::operator=(OwnedStream&& other) noexcept {
  if (this != &other) {
    OwnedStream old(std::move(*this));
    native_ = std::exchange(other.native_, nullptr);
  }
  return *this;
}

OwnedStream::~OwnedStream() {
  if (native_)
    warn_if_failed(cudaStreamDestroy(static_cast<cudaStream_t>(native_)), "cudaStreamDestroy");
}

void memcpy_async(void* dst, const void* src, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, to_native(stream)),
        chorus::detail::concat("cudaMemcpyAsync(", bytes, " bytes)"));
}

void memset_async(void* dst, int value, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  check(cudaMemsetAsync(dst, value, bytes, to_native(stream)),
        chorus::detail::concat("cudaMemsetAsync(", bytes, " bytes)"));
}

void stream_synchronize(Stream stream) {
  check(cudaStreamSynchronize(to_native(stream)), "cudaStreamSynchronize");
}

bool stream_query(Stream stream) {
  const cudaError_t err = cudaStreamQuery(to_native(stream));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  check(err, "cudaStreamQuery");
  return true;
}

// ---- events -------------------------------------------------------------------------------------

Event::Event(EventOptions options) {
  if (options.interprocess && options.timing)
    throw InvalidArgument("gpu::Event: an interprocess event cannot have timing enabled");
  unsigned flags = options.timing ? cudaEventDefault : cudaEventDisableTiming;
  if (options.interprocess) flags |= cudaEventInterprocess;
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, flags), "cudaEventCreateWithFlags");
  native_ = e;
}

Event::Event(Event&& other) noexcept : native_(std::exchange(other.native_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    Event old(std::move(*this));
    native_ = std::exchange(other.native_, nullptr);
  }
  return *this;
}

Event::~Event() {
  if (native_)
    warn_if_failed(cudaEventDestroy(static_cast<cudaEvent_t>(native_)), "cudaEventDestroy");
}

void Event::record(Stream stream) {
  check(cudaEventRecord(static_cast<cudaEvent_t>(native_), to_native(stream)), "cudaEventRecord");
}

bool Event::query() const {
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(native_));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  check(err, "cudaEventQuery");
  return true;
}

void Event::synchronize() const {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(native_)), "cudaEventSynchronize");
}

void stream_wait(Stream stream, const Event& event) {
  check(cudaStreamWaitEvent(to_native(stream), native_event(event), 0), "cudaStreamWaitEvent");
}

float elapsed_ms(const Event& start, const Event& end) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, native_event(start), native_event(end)), "cudaEventElapsedTime");
  return ms;
}

// ---- inter-process handles ----------------------------------------------------------------------

static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(IpcMemHandle::bytes));
static_assert(sizeof(cudaIpcEventHandle_t) == sizeof(IpcEventHandle::bytes));

IpcMemHandle ipc_mem_handle(const void* device_ptr) {
  cudaIpcMemHandle_t native_handle;
  check(cudaIpcGetMemHandle(&native_handle, const_cast<void*>(device_ptr)), "cudaIpcGetMemHandle");
  IpcMemHandle handle;
  std::memcpy(handle.bytes.data(), &native_handle, sizeof(native_handle));
  return handle;
}

#if defined(CHORUS_GPU_HIP)

AllocationRange allocation_range(const void* device_ptr) {
  hipDeviceptr_t base = nullptr;
  size_t bytes = 0;
  check(hipMemGetAddressRange(&base, &bytes, const_cast<void*>(device_ptr)),
        "hipMemGetAddressRange");
  return {static_cast<const void*>(base), bytes};
}

#else  // CUDA

namespace {

// cuMemGetAddressRange (the CUDA 12 ABI: 64-bit CUdeviceptr), resolved once through the runtime.
using GetAddressRange = CUresult(CUDAAPI*)(CUdeviceptr*, size_t*, CUdeviceptr);

GetAddressRange driver_get_address_range() {
  static const GetAddressRange fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000,
                                                             cudaEnableDefault, &status);
#else
    const cudaError_t err =
        cudaGetDriverEntryPoint("cuMemGetAddressRange", &p, cudaEnableDefault, &status);
#endif
    if (err != cudaSuccess || status != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return GetAddressRange{nullptr};
    }
    return reinterpret_cast<GetAddressRange>(p);
  }();
  return fn;
}

}  // namespace

AllocationRange allocation_range(const void* device_ptr) {
  const GetAddressRange fn = driver_get_address_range();
  if (fn == nullptr)
    throw GpuError(ErrorKind::kSystem,
                   "allocation_range: the driver has no cuMemGetAddressRange entry point",
                   static_cast<int>(cudaErrorNotSupported));
  CUdeviceptr base = 0;
  size_t bytes = 0;
  const CUresult r = fn(&base, &bytes, reinterpret_cast<CUdeviceptr>(device_ptr));
  if (r != CUDA_SUCCESS)
    throw GpuError(
        r == CUDA_ERROR_INVALID_VALUE ? ErrorKind::kInvalidArgument : ErrorKind::kSystem,
        chorus::detail::concat("cuMemGetAddressRange: driver error ", static_cast<int>(r),
                               " (is the pointer device memory from cudaMalloc?)"),
        static_cast<int>(r));
  return {reinterpret_cast<const void*>(base), bytes};
}

#endif

IpcMapping::IpcMapping(const IpcMemHandle& handle) {
  cudaIpcMemHandle_t native_handle;
  std::memcpy(&native_handle, handle.bytes.data(), sizeof(native_handle));
  check(cudaIpcOpenMemHandle(&data_, native_handle, cudaIpcMemLazyEnablePeerAccess),
        "cudaIpcOpenMemHandle");
}

IpcMapping::IpcMapping(IpcMapping&& other) noexcept : data_(std::exchange(other.data_, nullptr)) {}

IpcMapping& IpcMapping::operator=(IpcMapping&& other) noexcept {
  if (this != &other) {
    IpcMapping old(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

IpcMapping::~IpcMapping() {
  if (data_) warn_if_failed(cudaIpcCloseMemHandle(data_), "cudaIpcCloseMemHandle");
}

IpcEventHandle ipc_event_handle(const Event& event) {
  cudaIpcEventHandle_t native_handle;
  check(cudaIpcGetEventHandle(&native_handle, native_event(event)), "cudaIpcGetEventHandle");
  IpcEventHandle handle;
  std::memcpy(handle.bytes.data(), &native_handle, sizeof(native_handle));
  return handle;
}

Event open_ipc_event(const IpcEventHandle& handle) {
  cudaIpcEventHandle_t native_handle;
  std::memcpy(&native_handle, handle.bytes.data(), sizeof(native_handle));
  cudaEvent_t e = nullptr;
  check(cudaIpcOpenEventHandle(&e, native_handle), "cudaIpcOpenEventHandle");
  return Event(Event::Adopt{}, e);
}

}  // namespace chorus::gpu

namespace chorus::kernels::gpu::detail {

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) [[unlikely]]
    chorus::gpu::detail::throw_gpu_error(static_cast<int>(err), what);
}

}  // namespace chorus::kernels::gpu::detail
