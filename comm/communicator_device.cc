// chorus — the Communicator's stream-ordered operations (device_ops.h): issued on the caller's
// thread, run on the progress thread.
#include <chrono>
#include <string>

#include "chorus/config.h"
#include "communicator_impl.h"

namespace chorus {
namespace {

const IntKnob kStagingBytes{"CHORUS_GPU_STAGING_BYTES", int64_t{1} << 30,
                            "pinned host memory the device operations of one communicator may "
                            "hold in flight before a call waits for earlier ones (one operation "
                            "may use more)"};

}  // namespace

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
    device_ops_ = std::make_unique<DeviceOps>(device, rank, static_cast<size_t>(limit));
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
  op.args = d.args;  // the staging block, or the caller's host buffers
  if (!error) error = execute(op);
  device_ops_->release(d);
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
