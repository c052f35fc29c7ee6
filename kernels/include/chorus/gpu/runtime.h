// chorus — the GPU runtime as chorus uses it: devices, memory, streams, events and IPC handles,
// over CUDA or HIP (whichever chorus was built with) and usable from CPU-only code: no CUDA or HIP
// header is included here, native handles travel as void*.
//
// Every failing runtime call throws chorus::gpu::GpuError naming the call and carrying the
// runtime's error name and text; destructors never throw (a failure there is logged). A chorus
// built without GPU support has the same API: probe_devices() reports no device and why,
// pointer_info() calls every pointer host memory, and everything that needs a device throws a
// chorus::Error saying "built without GPU support".
//
// Vocabulary: "device" is a device ordinal as the runtime numbers the visible devices
// (CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES apply); calls without a device argument act on the
// calling thread's current device, like the runtime itself.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "chorus/error.h"

namespace chorus::gpu {

enum class Backend : uint8_t { kNone, kCuda, kHip };

// What this chorus was built with.
Backend backend() noexcept;
std::string_view to_string(Backend backend) noexcept;

// A failed CUDA/HIP runtime call. kind() is kInvalidArgument for the runtime's invalid-value,
// invalid-device and invalid-handle errors, kSystem for everything else; code() is the native
// cudaError_t / hipError_t value.
class GpuError : public Error {
 public:
  GpuError(ErrorKind kind, std::string message, int code)
      : Error(kind, std::move(message)), code_(code) {}
  // The same error as raised inside a communicator's operation (its rank, name and number).
  GpuError(const GpuError& e, int rank, std::string op, int64_t seq)
      : Error(e.kind(), e.message(), rank, std::move(op), seq), code_(e.code_) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

// ---- devices ------------------------------------------------------------------------------------

// The devices this process can use. count == 0 comes with a reason: built without GPU support, no
// driver (the runtime's "insufficient driver" answer, as on a machine without a GPU), no device,
// or the runtime's error. Never throws; cheap after the first call.
struct Devices {
  int count = 0;
  std::string reason;  // empty when count > 0
};
Devices probe_devices() noexcept;

// "CUDA runtime 13.0, driver 12.8" / "HIP runtime 5.2, driver ..." / "no GPU runtime" (never
// throws).
std::string version_string();

int current_device();
void set_device(int device);

// Makes `device` current on this thread for a scope, then restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device), previous_(current_device()) {
    if (previous_ != device_) set_device(device_);
  }
  ~DeviceGuard() {
    if (previous_ == device_) return;
    try {
      set_device(previous_);
    } catch (...) {
      // Destructors do not throw; the caller's device is what it was unless the runtime broke.
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_;
};

struct DeviceProperties {
  std::string name;
  std::string pci_bus_id;   // "0000:3b:00.0", to match the device with the topology
  size_t total_memory = 0;  // bytes
  int multiprocessors = 0;  // SMs (CUDA) or compute units (HIP)
  int major = 0;            // compute capability (CUDA) or gfx major (HIP)
  int minor = 0;
};
DeviceProperties device_properties(int device);

// Whether `device` can address `peer`'s memory directly (NVLink, xGMI or PCIe peer-to-peer).
bool can_access_peer(int device, int peer);
// Maps `peer`'s memory into the current device's address space; already enabled is not an error.
void enable_peer_access(int peer);

// Waits for all work on the current device.
void device_synchronize();

// ---- memory -------------------------------------------------------------------------------------

// Device memory on the current device, freed at destruction. Empty (data() null) for 0 bytes.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const noexcept { return data_; }
  size_t bytes() const noexcept { return bytes_; }
  // Forgets the memory without freeing it (when another process may still map it).
  void leak() noexcept;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

enum class MemoryKind : uint8_t {
  kHost,        // ordinary (pageable) host memory, or any pointer the runtime does not know
  kPinnedHost,  // page-locked host memory registered with the runtime
  kDevice,      // device memory (including a peer's memory opened through IPC)
  kManaged,     // unified (managed) memory
};
std::string_view to_string(MemoryKind kind) noexcept;

struct PointerInfo {
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;  // the owning device for kDevice and kManaged, else -1
};
// Classifies any pointer; an unknown pointer is host memory. Without a device (or without GPU
// support) every pointer is host memory and no runtime call is made.
PointerInfo pointer_info(const void* ptr);
// True for device and managed memory: what a device buffer argument must be.
bool is_device_pointer(const void* ptr);

// Page-locked host memory (cudaHostAlloc / hipHostMalloc), usable with every device, freed at
// destruction; empty (data() null) for 0 bytes. Copies between it and device memory are truly
// asynchronous. `mapped`: also mapped into the devices' address space, device_pointer() being its
// address there (a flag the host writes and a stream waits on, stream_wait_value). Freeing pinned
// memory may make the runtime wait for the device: destroy it where no device work still waits
// for the destroying thread.
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  explicit PinnedHostBuffer(size_t bytes, bool mapped = false);
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  ~PinnedHostBuffer();

  void* data() const noexcept { return data_; }
  size_t bytes() const noexcept { return bytes_; }
  // The device-side address of mapped memory; null unless constructed with mapped = true.
  void* device_pointer() const noexcept { return device_; }
  // Gives the memory up without freeing it (for a flag the device may still read when its owner
  // goes away); the buffer is empty afterwards.
  void leak() noexcept;

 private:
  void* data_ = nullptr;
  void* device_ = nullptr;
  size_t bytes_ = 0;
};

// ---- streams ------------------------------------------------------------------------------------

// A non-owning reference to a cudaStream_t / hipStream_t. Stream{} is the default stream; a stream
// made elsewhere (a framework's current stream) is wrapped with Stream{native}.
struct Stream {
  void* native = nullptr;
};

// A stream created and destroyed by chorus. Non-blocking streams do not synchronise with the
// legacy default stream.
class OwnedStream {
 public:
  explicit OwnedStream(bool non_blocking = true);
  OwnedStream(OwnedStream&& other) noexcept;
  OwnedStream& operator=(OwnedStream&& other) noexcept;
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  ~OwnedStream();

  Stream get() const noexcept { return Stream{native_}; }
  operator Stream() const noexcept { return get(); }

 private:
  void* native_ = nullptr;
};

// Any direction (host or device on either side: the runtime tells them apart by address).
void memcpy_async(void* dst, const void* src, size_t bytes, Stream stream);
void memset_async(void* dst, int value, size_t bytes, Stream stream);
void stream_synchronize(Stream stream);
// True when everything queued on the stream has finished.
bool stream_query(Stream stream);
// True while the stream is being captured into a graph (CUDA graphs / HIP graphs): work queued on
// it then is recorded, not run, so nothing may wait for it from the host.
bool stream_is_capturing(Stream stream);
// Puts the calling thread in relaxed stream-capture mode, so that its runtime calls (event
// queries, allocations) neither fail nor invalidate a capture another thread runs in global mode;
// for threads that serve others, like a communicator's progress thread. A no-op where the
// runtime has no capture modes (HIP 5) and without GPU support.
void set_relaxed_capture_mode() noexcept;

// Captures the work queued on a stream into a graph for its lifetime (thread-local capture mode)
// and throws the graph away at the end: for tests and probes of code that must refuse captured
// streams (chorus itself runs no graphs). Nothing queued during the capture runs.
class StreamCapture {
 public:
  explicit StreamCapture(Stream stream);
  StreamCapture(const StreamCapture&) = delete;
  StreamCapture& operator=(const StreamCapture&) = delete;
  ~StreamCapture();

 private:
  Stream stream_;
};

// How stream_wait_value() makes a stream wait.
enum class WaitMethod : uint8_t {
  kAuto,    // kMemOp where the device supports it, else kKernel; CHORUS_GPU_STREAM_WAIT overrides
  kMemOp,   // a stream memory operation: cuStreamWaitValue64 (or 32), hipStreamWaitValue64
  kKernel,  // a one-thread kernel polling the word (sleeping between polls where it can)
};
std::string_view to_string(WaitMethod method) noexcept;
// What kAuto means on the current device: kMemOp or kKernel.
WaitMethod stream_wait_method();
// Makes `stream` wait, on the device and without blocking the host, until the 64-bit word at
// `flag` reaches `value`: (int64_t)(*flag - value) >= 0, a cyclic comparison, so values may wrap.
// Where only 32-bit stream memory operations exist the low 32 bits are compared the same way,
// so fewer than 2^31 values may separate a wait from the value last written. `flag` is a device
// address, 8-byte aligned: a mapped PinnedHostBuffer's device_pointer() (the host then stores
// the value with a release store) or device memory. Work queued on `stream` afterwards runs once
// the word is reached; the host thread returns at once. The driver's stream memory operations
// are reached through the runtime (cudaGetDriverEntryPoint), so libcuda is never linked. Throws
// GpuError when the wait cannot be queued; kMemOp where the device has no stream memory
// operations throws chorus::Error (kSystem).
void stream_wait_value(Stream stream, const void* flag, uint64_t value,
                       WaitMethod method = WaitMethod::kAuto);

// ---- events -------------------------------------------------------------------------------------

struct IpcEventHandle;

struct EventOptions {
  bool timing = false;        // needed for elapsed_ms(); costs a little on record
  bool interprocess = false;  // needed for ipc_event_handle(); requires timing == false
};

class Event {
 public:
  explicit Event(EventOptions options = {});
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  void record(Stream stream);
  // True when the work recorded before it has finished (and for an event never recorded).
  bool query() const;
  void synchronize() const;
  void* native() const noexcept { return native_; }

 private:
  friend Event open_ipc_event(const IpcEventHandle& handle);
  struct Adopt {};
  Event(Adopt, void* native) noexcept : native_(native) {}
  void* native_ = nullptr;
};

// Makes `stream` wait (on the device, not the host) until `event`'s recorded work is done.
void stream_wait(Stream stream, const Event& event);
// Milliseconds between two recorded timing events, once `end` has completed.
float elapsed_ms(const Event& start, const Event& end);

// ---- inter-process handles ----------------------------------------------------------------------
//
// The opaque blobs a process sends to a peer on the same host (through the bootstrap store) so the
// peer can open the same device allocation or event. 64 bytes in both CUDA and HIP.

struct IpcMemHandle {
  std::array<unsigned char, 64> bytes{};
};
struct IpcEventHandle {
  std::array<unsigned char, 64> bytes{};
};

// The handle of the allocation that starts at `device_ptr` (the runtime hands out whole
// allocations; a peer adds its own offsets).
IpcMemHandle ipc_mem_handle(const void* device_ptr);

// The device allocation that contains `device_ptr`: its first byte and size (cuMemGetAddressRange,
// reached through the runtime's driver entry point so libcuda is never linked;
// hipMemGetAddressRange on HIP). What a process exports through IPC is the allocation, so a pointer
// inside it travels as (handle of `base`, ptr - base). Throws GpuError for memory the runtime did
// not allocate.
struct AllocationRange {
  const void* base = nullptr;
  size_t bytes = 0;
};
AllocationRange allocation_range(const void* device_ptr);

// A peer's allocation mapped into this process (on the current device); unmapped at destruction.
class IpcMapping {
 public:
  IpcMapping() = default;
  explicit IpcMapping(const IpcMemHandle& handle);
  IpcMapping(IpcMapping&& other) noexcept;
  IpcMapping& operator=(IpcMapping&& other) noexcept;
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;
  ~IpcMapping();

  void* data() const noexcept { return data_; }

 private:
  void* data_ = nullptr;
};

// The handle of an event created with EventOptions{.interprocess = true}.
IpcEventHandle ipc_event_handle(const Event& event);
// A peer's event, to wait on with stream_wait() or query(); destroying it leaves the peer's alone.
Event open_ipc_event(const IpcEventHandle& handle);

}  // namespace chorus::gpu
