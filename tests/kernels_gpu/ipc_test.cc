// IPC handles across real processes: this process fills a device buffer, records an interprocess
// event and starts peers (gpu_ipc_peer, spread over the host's GPUs like ranks). Each peer opens
// the buffer and the event, makes its stream wait on the event, checks the whole buffer through its
// mapping and writes its own slice back; this process then checks every slice. World sizes 2 and 4.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "chorus/gpu/runtime.h"
#include "gpu_test.h"

extern char** environ;

namespace chorus::gpu {
namespace {

using kernels::gpu::testing::DeviceTest;

constexpr size_t kSliceBytes = 1 << 20;

template <size_t N>
std::string to_hex(const std::array<unsigned char, N>& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  for (unsigned char b : bytes) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

// The IPC peer program: CHORUS_GPU_IPC_PEER when set, else the one beside this test binary (where
// a build or a gpu-pack puts it), else the path it was built at.
std::string peer_program() {
  if (const char* env = std::getenv("CHORUS_GPU_IPC_PEER"); env != nullptr && *env != '\0')
    return env;
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string beside(self, static_cast<size_t>(n));
    beside = beside.substr(0, beside.rfind('/') + 1) + "gpu_ipc_peer";
    if (::access(beside.c_str(), X_OK) == 0) return beside;
  }
  return CHORUS_GPU_IPC_PEER;
}

// Starts `argv`; returns its pid.
pid_t spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (rc != 0) return -1;
  return pid;
}

// Waits up to `seconds` for pid; kills it past the deadline. Returns its exit status or -1.
int wait_for(pid_t pid, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class GpuIpc : public DeviceTest, public ::testing::WithParamInterface<int> {};

TEST_P(GpuIpc, PeersOpenBufferAndEvent) {
  const int world = GetParam();
  const int peers = world - 1;
  const int devices = probe_devices().count;
  const size_t bytes = kSliceBytes * static_cast<size_t>(world);

  DeviceBuffer buf(bytes);
  std::vector<unsigned char> pattern(bytes);
  for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<unsigned char>((i * 7) % 253);
  OwnedStream stream;
  Event ready({.interprocess = true});
  memcpy_async(buf.data(), pattern.data(), bytes, stream);
  ready.record(stream);  // peers wait for this on their own streams, not on our host
  const std::string mem = to_hex(ipc_mem_handle(buf.data()).bytes);
  const std::string event = to_hex(ipc_event_handle(ready).bytes);

  std::vector<pid_t> pids;
  for (int rank = 1; rank <= peers; ++rank) {
    const int device = (device_ + rank) % devices;
    pids.push_back(spawn({peer_program(), mem, event, std::to_string(rank), std::to_string(world),
                          std::to_string(device), std::to_string(kSliceBytes)}));
    ASSERT_GT(pids.back(), 0) << "could not start " << peer_program();
  }
  for (size_t k = 0; k < pids.size(); ++k)
    EXPECT_EQ(wait_for(pids[k], 120), 0) << "peer rank " << k + 1 << " failed (see its stderr)";

  std::vector<unsigned char> back(bytes);
  memcpy_async(back.data(), buf.data(), bytes, stream);
  stream_synchronize(stream);
  for (int rank = 0; rank < world; ++rank) {
    for (size_t i = 0; i < kSliceBytes; ++i) {
      const size_t at = static_cast<size_t>(rank) * kSliceBytes + i;
      const unsigned char want = rank == 0 ? pattern[at] : static_cast<unsigned char>(rank);
      ASSERT_EQ(back[at], want) << "rank " << rank << "'s slice, byte " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(World, GpuIpc, ::testing::Values(2, 4),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

}  // namespace
}  // namespace chorus::gpu
