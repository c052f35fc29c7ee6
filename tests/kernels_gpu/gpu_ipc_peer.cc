// The peer side of ipc_test.cc: opens another process's device buffer and event by handle, checks
// the buffer after waiting on the event, and fills its own slice with its rank. Exit status 0 on
// success; anything else prints why on stderr.
//
//   gpu_ipc_peer MEM_HANDLE_HEX EVENT_HANDLE_HEX RANK WORLD DEVICE SLICE_BYTES
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "chorus/gpu/runtime.h"

namespace {

template <size_t N>
bool from_hex(const std::string& hex, std::array<unsigned char, N>& out) {
  if (hex.size() != 2 * N) return false;
  for (size_t i = 0; i < N; ++i)
    out[i] = static_cast<unsigned char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return true;
}

int run(int argc, char** argv) {
  using namespace chorus::gpu;
  if (argc != 7) {
    std::fprintf(stderr, "usage: gpu_ipc_peer MEM EVENT RANK WORLD DEVICE SLICE_BYTES\n");
    return 2;
  }
  IpcMemHandle mem;
  IpcEventHandle event;
  if (!from_hex(argv[1], mem.bytes) || !from_hex(argv[2], event.bytes)) {
    std::fprintf(stderr, "gpu_ipc_peer: malformed handle\n");
    return 2;
  }
  const int rank = std::atoi(argv[3]);
  const int world = std::atoi(argv[4]);
  const size_t slice = std::strtoull(argv[6], nullptr, 10);
  set_device(std::atoi(argv[5]));

  IpcMapping mapping(mem);
  Event ready = open_ipc_event(event);
  OwnedStream stream;
  stream_wait(stream, ready);
  const size_t bytes = slice * static_cast<size_t>(world);
  std::vector<unsigned char> seen(bytes);
  memcpy_async(seen.data(), mapping.data(), bytes, stream);
  stream_synchronize(stream);
  for (size_t i = 0; i < bytes; ++i) {
    if (seen[i] != static_cast<unsigned char>((i * 7) % 253)) {
      std::fprintf(stderr, "gpu_ipc_peer rank %d: byte %zu is %u before any peer wrote\n", rank, i,
                   seen[i]);
      return 1;
    }
  }
  memset_async(static_cast<unsigned char*>(mapping.data()) + slice * rank, rank, slice, stream);
  stream_synchronize(stream);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_ipc_peer: %s\n", e.what());
    return 1;
  }
}
