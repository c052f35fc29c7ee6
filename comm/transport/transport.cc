// The parts of the transport seam (transport.h) that are not a transport's own.
#include <sched.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "chorus/error.h"
#include "transport/transport.h"

namespace chorus::transport {

void Transport::fix_capabilities(Capabilities capabilities) {
  if (!capabilities.moves_device_memory && capabilities.host_memory_only.empty())
    capabilities.host_memory_only = "the " + name() + " transport moves host memory only";
  capabilities_ = std::move(capabilities);
}

void Transport::set_device_memory(const DeviceContext* device) {
  if (device != nullptr)
    throw Error(ErrorKind::kTransport,
                detail::concat("the ", name(),
                               " transport cannot move device memory (device buffers go through "
                               "pinned host staging there: CHORUS_GPU_PATH=staging)"));
}

void finish_device_work(const DeviceContext& context, gpu::Event& done) {
  done.record(context.stream);
  auto sleep = std::chrono::microseconds(5);
  for (int pass = 0; !done.query(); ++pass) {
    if (std::chrono::steady_clock::now() >= context.deadline)
      throw Timeout(detail::concat("device ", context.device,
                                   " did not finish this operation's "
                                   "copies and reductions in time (docs/GPU.md: a stream of the "
                                   "communicator may be stuck behind one that waits for it)"));
    if (pass < 64) continue;
    if (pass < 96) {
      sched_yield();
      continue;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(200));
  }
}

}  // namespace chorus::transport
