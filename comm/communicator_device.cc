// chorus — the Communicator's stream-ordered operations (device_ops.h): issued on the caller's
// thread, run on the progress thread, on the IPC or the staging path (device_memory.h).
#include <chrono>
#include <string>

#include "chorus/config.h"
#include "chorus/log.h"
#include "communicator_impl.h"

namespace chorus {
namespace {

const IntKnob kStagingBytes{"CHORUS_GPU_STAGING_BYTES", int64_t{1} << 30,
                            "pinned host memory the device operations of one communicator may "
                            "hold in flight before a call waits for earlier ones (one operation "
                            "may use more)"};
const StringKnob kGpuPath{"CHORUS_GPU_PATH", "auto",
                          "how device buffers reach the peers: auto (IPC when every rank is on "
                          "this host and sees the same devices, else pinned host staging), ipc "
                          "(refuse when IPC is impossible) or staging"};

// For one operation on the IPC path: the scratch, the transport and the buffers' memory
// operations work on device memory, and go back to host memory afterwards (also on failure).
class DeviceMemoryScope {
 public:
  DeviceMemoryScope(algo::Scratch& scratch, transport::Transport& transport, DeviceMemoryOps& mem,
                    std::chrono::steady_clock::time_point deadline)
      : scratch_(scratch), transport_(transport), context_{mem.device(), mem.stream(), deadline} {
    mem.set_deadline(deadline);
    transport_.set_device_memory(&context_);
    scratch_.use_memory(&mem);
  }
  ~DeviceMemoryScope() {
    scratch_.use_memory(nullptr);
    try {
      transport_.set_device_memory(nullptr);
    } catch (...) {
      // Going back to host memory cannot fail.
    }
  }
  DeviceMemoryScope(const DeviceMemoryScope&) = delete;
  DeviceMemoryScope& operator=(const DeviceMemoryScope&) = delete;

 private:
  algo::Scratch& scratch_;
  transport::Transport& transport_;
  transport::DeviceContext context_;
};

// An out-of-place broadcast root copies its input into place first and then runs in place, so
// that the broadcast algorithms need not copy between the caller's buffers themselves.
void root_copies_first(algo::CollArgs& a, int rank, DeviceMemoryOps& mem) {
  if (a.coll != Collective::kBroadcast || rank != a.root || a.send == a.recv || a.count == 0)
    return;
  mem.copy(a.recv, a.send, a.bytes());
  a.send = a.recv;
}

}  // namespace

GpuPath Communicator::Impl::device_path(std::string* why) const {
  if (device_ops_) return device_ops_->path();
  const bool transport_ok = transport && transport->capabilities().moves_device_memory;
  const std::string transport_why =
      transport && !transport_ok ? transport->capabilities().host_memory_only : "";
  return choose_gpu_path(parse_gpu_path(kGpuPath.get()), size, transport_ok, transport_why, why);
}

bool Communicator::Impl::device_buffers_on_ipc() const {
  if (device_ops_) return device_ops_->path() == GpuPath::kIpc;
  if (gpu::probe_devices().count == 0) return false;
  try {
    return device_path() == GpuPath::kIpc;
  } catch (const InvalidArgument&) {
    return false;  // CHORUS_GPU_PATH=ipc where IPC is impossible: device calls are refused
  }
}

void Communicator::Impl::check_stream(const algo::CollArgs& args, gpu::Stream stream) const {
  const gpu::Devices devices = gpu::probe_devices();
  const std::string name(to_string(args.coll));
  if (devices.count == 0) {
    if (stream.native == nullptr) return;
    throw InvalidArgument(
        name + ": a stream was given but this process has no GPU (" + devices.reason + ")", rank,
        name);
  }
  if (gpu::stream_is_capturing(stream))
    throw InvalidArgument(name +
                              ": the stream is being captured into a graph; chorus operations "
                              "cannot be captured (issue them outside the capture)",
                          rank, name);
}

Work Communicator::Impl::submit_on_stream(const algo::CollArgs& args, const MemoryPlacement& where,
                                          gpu::Stream stream) {
  // No device (or no GPU support): no pointer is device memory, and the default stream has
  // nothing queued (check_stream refused any other), so this is the plain asynchronous call.
  if (gpu::probe_devices().count == 0) return submit(args, false);
  const std::string name(to_string(args.coll));
  if (!device_ops_) {
    const int64_t limit = kStagingBytes.get();
    CHORUS_ARG_CHECK(limit > 0, "CHORUS_GPU_STAGING_BYTES must be positive, got ", limit);
    const int device = where.device ? where.device_id : gpu::current_device();
    std::string why;
    const GpuPath path = device_path(&why);
    CHORUS_INFO(kLogColl, "rank ", rank, ": device buffers move by ",
                path == GpuPath::kIpc ? std::string("IPC (") + transport->name() + ")"
                                      : "pinned-host staging (" + why + ")");
    device_ops_ = std::make_unique<DeviceOps>(device, rank, static_cast<size_t>(limit), path);
  } else if (where.device && where.device_id != device_ops_->device()) {
    throw InvalidArgument(
        detail::concat(name, ": the buffers are on device ", where.device_id,
                       " but this communicator works with device ", device_ops_->device(),
                       " (fixed by its first device operation); use one communicator per device"),
        rank, name);
  }
  const std::chrono::milliseconds op_timeout = call_timeout.count() > 0 ? call_timeout : timeout;
  DeviceOp op = device_ops_->prepare(args, where.device, stream, rank, size, op_timeout);
  return submit(args, false, std::move(op));
}

std::exception_ptr Communicator::Impl::execute_device(Op& op) {
  using Clock = std::chrono::steady_clock;
  DeviceOp& d = *op.device;
  std::exception_ptr error;
  try {
    // This thread serves the application's streams: its event queries must not break a graph
    // capture the application runs meanwhile.
    gpu::set_relaxed_capture_mode();
    gpu::set_device(device_ops_->device());
    // Stops early once the communicator breaks (abort, a failed operation): execute() then
    // answers at once.
    device_ops_->wait_staged(d, Clock::now() + op.timeout,
                             [this] { return broken_flag_.load(std::memory_order_acquire); });
  } catch (...) {
    error = fail_current(op);
  }
  op.args = d.args;  // the staging block, the caller's host buffers, or its device buffers
  if (!error && d.device_memory) {
    // The IPC path: the algorithm runs on the caller's device buffers.
    try {
      DeviceMemoryScope scope(scratch, *transport, *device_ops_->memory(),
                              Clock::now() + op.timeout);
      root_copies_first(op.args, rank, *device_ops_->memory());
      error = execute(op);
    } catch (...) {
      error = fail_current(op);
    }
  } else if (!error) {
    error = execute(op);
  }
  device_ops_->release(d);
  if (d.device_memory) {
    // After a failure a link's copy into the caller's buffers may still be queued. It ends here,
    // after the release: before it, it could sit behind the caller's stream in a hardware queue.
    try {
      device_ops_->memory()->set_deadline(Clock::now() + std::chrono::seconds(10));
      device_ops_->memory()->finish();
    } catch (...) {
      // The operation has failed already; its error says more.
    }
  }
  if (!error) {
    try {
      device_ops_->wait_done(d, Clock::now() + op.timeout);
    } catch (...) {
      error = fail_current(op);
    }
  }
  device_ops_->finish(d);
  return error;
}

void Communicator::Impl::register_device_memory(const void* ptr, size_t bytes) {
  CHORUS_ARG_CHECK(ptr != nullptr && bytes > 0, "register_device_memory: an empty range (", ptr,
                   ", ", bytes, " bytes)");
  if (gpu::probe_devices().count > 0) {
    const gpu::PointerInfo info = gpu::pointer_info(ptr);
    CHORUS_ARG_CHECK(
        info.kind == gpu::MemoryKind::kDevice || info.kind == gpu::MemoryKind::kManaged,
        "register_device_memory: ", ptr, " is ", gpu::to_string(info.kind), ", not device memory");
    CHORUS_ARG_CHECK(!device_ops_ || info.device == device_ops_->device(),
                     "register_device_memory: ", ptr, " is on device ", info.device,
                     " but this communicator works with device ", device_ops_->device());
  }
  synchronize();
  registered.add(ptr, bytes);
  try {
    if (transport) transport->register_device_memory(ptr, bytes);
  } catch (...) {
    registered.remove(ptr);
    throw;
  }
}

void Communicator::Impl::forget_device_memory(const void* ptr) {
  synchronize();
  CHORUS_ARG_CHECK(ptr == nullptr || registered.remove(ptr), "deregister_device_memory: ", ptr,
                   " was not registered on rank ", rank);
  if (transport) transport->deregister_device_memory(ptr);
}

std::exception_ptr Communicator::Impl::fail_current(Op& op) {
  const std::string name(to_string(op.args.coll));
  try {
    throw;
  } catch (const gpu::GpuError& e) {
    gpu::GpuError full(e, rank, name, op.seq);
    return fail(op, std::make_exception_ptr(full), full);
  } catch (const Error& e) {
    Error full(e.kind(), e.message(), rank, name, op.seq, e.peer());
    return fail(op, std::make_exception_ptr(full), full);
  } catch (const std::exception& e) {
    Error full(ErrorKind::kInternal, e.what(), rank, name, op.seq);
    return fail(op, std::make_exception_ptr(full), full);
  }
}

}  // namespace chorus
