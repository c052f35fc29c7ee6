// chorus-gpu-bandwidth — how fast one device moves memory: the copy engine (memcpy_async device to
// device), the chorus copy kernel, the chorus reduce kernel (f32 and bf16 sum of two inputs), and
// a peer copy to every other device it can reach. These are the ceilings the collectives within a
// host are compared against (tools/gpu-check.sh prints them next to chorus-bench's busbw).
//
// Output: one line per measurement, tab-separated, easy to grep:
//   result <name> <bytes> <ms per iteration> <GB/s>
// GB/s is bytes of output per second (1e9); a copy reads and writes that much, a two-input
// reduce reads twice that much and writes it once.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>

#include "chorus/gpu/runtime.h"
#include "chorus/kernels/gpu.h"

namespace {

namespace g = chorus::gpu;

struct Options {
  size_t bytes = size_t{1} << 30;
  int iters = 20;
  int device = 0;
};

void usage() {
  std::printf(
      "Usage: chorus-gpu-bandwidth [--bytes N] [--iters N] [--device D]\n"
      "  --bytes N   buffer size in bytes (default 1073741824; suffixes K, M, G)\n"
      "  --iters N   timed iterations per measurement, after 3 warm-up ones (default 20)\n"
      "  --device D  device to measure (default 0)\n");
}

size_t parse_size(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (*end) {
    case 'K':
    case 'k':
      v *= 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
    default:
      break;
  }
  return static_cast<size_t>(v);
}

// Times `op` on `stream`: 3 warm-up runs, then `iters` runs between two timing events.
double time_ms(const Options& o, g::Stream stream, const std::function<void()>& op) {
  for (int i = 0; i < 3; ++i) op();
  g::Event start({.timing = true}), stop({.timing = true});
  start.record(stream);
  for (int i = 0; i < o.iters; ++i) op();
  stop.record(stream);
  stop.synchronize();
  return g::elapsed_ms(start, stop) / o.iters;
}

void report(const char* name, size_t bytes, double ms) {
  std::printf("result\t%s\t%zu\t%.4f\t%.1f\n", name, bytes, ms, bytes / (ms * 1e6));
  std::fflush(stdout);
}

int run(const Options& o) {
  const g::Devices devices = g::probe_devices();
  if (devices.count == 0) {
    std::fprintf(stderr, "chorus-gpu-bandwidth: no GPU: %s\n", devices.reason.c_str());
    return 2;
  }
  g::set_device(o.device);
  const g::DeviceProperties p = g::device_properties(o.device);
  std::printf("device\t%d\t%s\t%s\t%.1f GiB\t%d SMs\t%s\n", o.device, p.name.c_str(),
              p.pci_bus_id.c_str(), p.total_memory / double(1 << 30), p.multiprocessors,
              g::version_string().c_str());

  g::DeviceBuffer a(o.bytes), b(o.bytes), c(o.bytes);
  g::OwnedStream stream;
  g::memset_async(a.data(), 1, o.bytes, stream);
  g::memset_async(b.data(), 2, o.bytes, stream);

  report("copy_engine", o.bytes,
         time_ms(o, stream, [&] { g::memcpy_async(c.data(), a.data(), o.bytes, stream); }));
  report("copy_kernel", o.bytes, time_ms(o, stream, [&] {
           chorus::kernels::gpu::copy(c.data(), a.data(), o.bytes, stream);
         }));
  report("reduce_f32_sum", o.bytes, time_ms(o, stream, [&] {
           chorus::kernels::gpu::reduce(chorus::DataType::kF32, chorus::ReduceOp::kSum, c.data(),
                                        a.data(), b.data(), o.bytes / 4, stream);
         }));
  report("reduce_bf16_sum", o.bytes, time_ms(o, stream, [&] {
           chorus::kernels::gpu::reduce(chorus::DataType::kBF16, chorus::ReduceOp::kSum, c.data(),
                                        a.data(), b.data(), o.bytes / 2, stream);
         }));

  for (int peer = 0; peer < devices.count; ++peer) {
    if (peer == o.device || !g::can_access_peer(o.device, peer)) continue;
    g::enable_peer_access(peer);
    g::set_device(peer);
    g::DeviceBuffer remote(o.bytes);
    g::set_device(o.device);
    const std::string name = "peer_copy_to_" + std::to_string(peer);
    report(name.c_str(), o.bytes,
           time_ms(o, stream, [&] { g::memcpy_async(remote.data(), a.data(), o.bytes, stream); }));
  }
  g::stream_synchronize(stream);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if ((arg == "--bytes" || arg == "-b") && has_value) {
      o.bytes = parse_size(argv[++i]);
    } else if (arg == "--iters" && has_value) {
      o.iters = std::atoi(argv[++i]);
    } else if (arg == "--device" && has_value) {
      o.device = std::atoi(argv[++i]);
    } else if (arg == "--help" || arg == "-h") {
      usage();
      return 0;
    } else {
      std::fprintf(stderr, "chorus-gpu-bandwidth: unknown argument '%s'\n", arg.c_str());
      usage();
      return 2;
    }
  }
  if (o.bytes < 16 || o.iters < 1) {
    std::fprintf(stderr, "chorus-gpu-bandwidth: --bytes must be >= 16 and --iters >= 1\n");
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chorus-gpu-bandwidth: %s\n", e.what());
    return 1;
  }
}
