#include "gpu_world.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace chorus::testing {
namespace {

gpu::Devices probe_in_child() {
  gpu::Devices d;
  int fds[2];
  if (pipe(fds) != 0) {
    d.reason = "cannot ask a child process about devices (pipe failed)";
    return d;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const gpu::Devices seen = gpu::probe_devices();
    const std::string text = std::to_string(seen.count) + "\n" + seen.reason;
    ssize_t written = 0;
    while (written < static_cast<ssize_t>(text.size())) {
      const ssize_t w = write(fds[1], text.data() + written, text.size() - written);
      if (w <= 0) break;
      written += w;
    }
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char chunk[256];
  for (ssize_t r; (r = read(fds[0], chunk, sizeof chunk)) > 0;) text.append(chunk, r);
  close(fds[0]);
  if (pid > 0) waitpid(pid, nullptr, 0);
  const size_t eol = text.find('\n');
  if (pid < 0 || eol == std::string::npos) {
    d.reason = "the device probe in a child process failed";
    return d;
  }
  d.count = std::atoi(text.substr(0, eol).c_str());
  d.reason = text.substr(eol + 1);
  return d;
}

}  // namespace

const gpu::Devices& devices_seen_by_a_child() {
  static const gpu::Devices devices = probe_in_child();
  return devices;
}

void GpuWorld::SetUp() {
  const gpu::Devices& d = devices_seen_by_a_child();
  if (d.count == 0) GTEST_SKIP() << "no GPU: " << d.reason;
}

void GpuPathWorld::SetUp() {
  GpuWorld::SetUp();
  if (IsSkipped()) return;
  ::setenv("CHORUS_GPU_PATH", path().c_str(), 1);
}

void GpuPathWorld::TearDown() { ::unsetenv("CHORUS_GPU_PATH"); }

std::string path_world_name(const ::testing::TestParamInfo<std::tuple<int, std::string>>& info) {
  return "np" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
}

std::vector<std::tuple<int, std::string>> worlds_and_paths() {
  return {{1, "staging"}, {2, "ipc"}, {2, "staging"}, {4, "ipc"}, {4, "staging"}};
}

int use_rank_device() {
  const int count = gpu::probe_devices().count;
  if (count == 0)
    throw Error(ErrorKind::kSystem, "no GPU in this rank: " + gpu::probe_devices().reason);
  const char* local_rank = std::getenv("CHORUS_LOCAL_RANK");
  const int device = local_rank ? std::atoi(local_rank) % count : 0;
  gpu::set_device(device);
  return device;
}

std::byte* DeviceArena::take(size_t bytes) {
  const size_t start = (used_ + kGuard + 255) / 256 * 256;
  const size_t end = start + bytes + kGuard;
  if (end > buffer_.bytes())
    throw Error(ErrorKind::kInternal, "test arena of " + std::to_string(buffer_.bytes()) +
                                          " bytes cannot hold another " + std::to_string(bytes));
  used_ = end;
  return static_cast<std::byte*>(buffer_.data()) + start;
}

HeldStream::HeldStream() : flag_(64, /*mapped=*/true) {
  __atomic_store_n(static_cast<uint64_t*>(flag_.data()), uint64_t{0}, __ATOMIC_RELEASE);
}

HeldStream::~HeldStream() {
  // Whatever a failed test left held runs now, so that nothing is freed under a waiting stream.
  __atomic_store_n(static_cast<uint64_t*>(flag_.data()), holds_ + 1, __ATOMIC_RELEASE);
  drains_within(30);
}

void HeldStream::hold() { gpu::stream_wait_value(stream_, flag_.device_pointer(), ++holds_); }

void HeldStream::release() {
  __atomic_store_n(static_cast<uint64_t*>(flag_.data()), holds_, __ATOMIC_RELEASE);
}

bool HeldStream::drains_within(int seconds) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (;;) {
    try {
      if (gpu::stream_query(stream_)) return true;
    } catch (const Error&) {
      return false;
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace chorus::testing
