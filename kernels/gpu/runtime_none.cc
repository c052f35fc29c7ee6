// chorus — chorus/gpu/runtime.h and the GPU kernel launches in a chorus built without CUDA or HIP:
// the same API, so CPU-only code links and asks at run time. Nothing here touches memory it was
// handed; whatever needs a device throws, saying so.
#include <string>

#include "chorus/gpu/runtime.h"
#include "error_text.h"
#include "launch.h"

namespace chorus::gpu {
namespace {

constexpr const char* kNoGpu =
    "chorus was built without GPU support (configure with -DCHORUS_WITH_CUDA=ON or "
    "-DCHORUS_WITH_HIP=ON)";

[[noreturn]] void no_gpu(std::string_view call) {
  throw Error(ErrorKind::kSystem, chorus::detail::concat(call, ": ", kNoGpu));
}

}  // namespace

namespace detail {

std::string describe_error(int code) {
  return chorus::detail::concat("GPU error (", code, "): ", kNoGpu);
}

void throw_gpu_error(int code, std::string_view call) {
  throw GpuError(ErrorKind::kSystem, chorus::detail::concat(call, ": ", describe_error(code)),
                 code);
}

}  // namespace detail

Backend backend() noexcept { return Backend::kNone; }

Devices probe_devices() noexcept {
  Devices d;
  try {
    d.reason = kNoGpu;
  } catch (...) {
  }
  return d;
}

std::string version_string() { return "no GPU runtime (built without GPU support)"; }

int current_device() { no_gpu("current_device"); }
void set_device(int) { no_gpu("set_device"); }
DeviceProperties device_properties(int) { no_gpu("device_properties"); }
bool can_access_peer(int, int) { no_gpu("can_access_peer"); }
void enable_peer_access(int) { no_gpu("enable_peer_access"); }
void device_synchronize() { no_gpu("device_synchronize"); }

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes != 0) no_gpu("DeviceBuffer");
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept : bytes_(other.bytes_) {
  other.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  bytes_ = other.bytes_;
  other.bytes_ = 0;
  return *this;
}
DeviceBuffer::~DeviceBuffer() = default;
void DeviceBuffer::leak() noexcept { bytes_ = 0; }

PinnedHostBuffer::PinnedHostBuffer(size_t bytes, bool) : bytes_(bytes) {
  if (bytes != 0) no_gpu("PinnedHostBuffer");
}
PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept : bytes_(other.bytes_) {
  other.bytes_ = 0;
}
PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  bytes_ = other.bytes_;
  other.bytes_ = 0;
  return *this;
}
PinnedHostBuffer::~PinnedHostBuffer() = default;
void PinnedHostBuffer::leak() noexcept { bytes_ = 0; }

PointerInfo pointer_info(const void*) { return PointerInfo{}; }
bool is_device_pointer(const void*) { return false; }

OwnedStream::OwnedStream(bool) { no_gpu("OwnedStream"); }
OwnedStream::OwnedStream(OwnedStream&&) noexcept {}
OwnedStream& OwnedStream::operator=(OwnedStream&&) noexcept { return *this; }
OwnedStream::~OwnedStream() = default;

void memcpy_async(void*, const void*, size_t, Stream) { no_gpu("memcpy_async"); }
void memset_async(void*, int, size_t, Stream) { no_gpu("memset_async"); }
void stream_synchronize(Stream) { no_gpu("stream_synchronize"); }
bool stream_query(Stream) { no_gpu("stream_query"); }
bool stream_is_capturing(Stream) { no_gpu("stream_is_capturing"); }
void set_relaxed_capture_mode() noexcept {}
StreamCapture::StreamCapture(Stream stream) : stream_(stream) { no_gpu("StreamCapture"); }
StreamCapture::~StreamCapture() = default;
WaitMethod stream_wait_method() { no_gpu("stream_wait_method"); }
void stream_wait_value(Stream, const void*, uint64_t, WaitMethod) { no_gpu("stream_wait_value"); }

Event::Event(EventOptions) { no_gpu("Event"); }
Event::Event(Event&&) noexcept {}
Event& Event::operator=(Event&&) noexcept { return *this; }
Event::~Event() = default;
void Event::record(Stream) { no_gpu("Event::record"); }
bool Event::query() const { no_gpu("Event::query"); }
void Event::synchronize() const { no_gpu("Event::synchronize"); }
void stream_wait(Stream, const Event&) { no_gpu("stream_wait"); }
float elapsed_ms(const Event&, const Event&) { no_gpu("elapsed_ms"); }

IpcMemHandle ipc_mem_handle(const void*) { no_gpu("ipc_mem_handle"); }
AllocationRange allocation_range(const void*) { no_gpu("allocation_range"); }
IpcMapping::IpcMapping(const IpcMemHandle&) { no_gpu("IpcMapping"); }
IpcMapping::IpcMapping(IpcMapping&&) noexcept {}
IpcMapping& IpcMapping::operator=(IpcMapping&&) noexcept { return *this; }
IpcMapping::~IpcMapping() = default;
IpcEventHandle ipc_event_handle(const Event&) { no_gpu("ipc_event_handle"); }
Event open_ipc_event(const IpcEventHandle&) { no_gpu("open_ipc_event"); }

}  // namespace chorus::gpu

namespace chorus::kernels::gpu::detail {

void launch_reduce(DataType, ReduceOp, void*, const void* const*, int, size_t,
                   chorus::gpu::Stream) {
  chorus::gpu::no_gpu("gpu reduce");
}
void launch_divide(DataType, void*, const void*, size_t, int64_t, chorus::gpu::Stream) {
  chorus::gpu::no_gpu("gpu divide");
}
void launch_copy(void*, const void*, size_t, chorus::gpu::Stream) {
  chorus::gpu::no_gpu("gpu copy");
}
void launch_cast(DataType, void*, DataType, const void*, size_t, chorus::gpu::Stream) {
  chorus::gpu::no_gpu("gpu cast");
}

}  // namespace chorus::kernels::gpu::detail
