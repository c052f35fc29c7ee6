// What the Communicator GPU tests share: the fixture that skips without a device, each rank's
// device, device memory for a rank's cases, and a stream the test itself holds.
//
// The ranks are forked from the test process (tests/comm/multiproc.h), and a process that has
// initialised CUDA must not fork and use it in the child. So the test process never touches
// the GPU runtime: whether there is a device is asked in a short-lived child, and every rank
// initialises the runtime itself after the fork.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/gpu/runtime.h"
#include "multiproc.h"

namespace chorus::testing {

// probe_devices() as a child process answers it (cached in the test process).
const gpu::Devices& devices_seen_by_a_child();

// Skips with the reason when there is no device.
class GpuWorld : public ::testing::Test {
 protected:
  void SetUp() override;
};

// The same, for tests that run on both ways device buffers move (CHORUS_GPU_PATH, docs/GPU.md):
// the parameter is (world size, "ipc" or "staging"), and the ranks (forked from the test process)
// inherit the setting.
class GpuPathWorld : public GpuWorld,
                     public ::testing::WithParamInterface<std::tuple<int, std::string>> {
 protected:
  void SetUp() override;
  void TearDown() override;
  int world() const { return std::get<0>(GetParam()); }
  const std::string& path() const { return std::get<1>(GetParam()); }
};
// "np2_ipc": the instantiation's test name suffix.
std::string path_world_name(const ::testing::TestParamInfo<std::tuple<int, std::string>>& info);
// 1 rank (staging only: one rank moves nothing), 2 and 4 ranks on both paths.
std::vector<std::tuple<int, std::string>> worlds_and_paths();

// In a rank: makes device CHORUS_LOCAL_RANK % count current and returns it.
int use_rank_device();

// Device memory for a rank's cases, allocated once (cudaMalloc and cudaFree per case would
// synchronise the device over and over), handed out in pieces that are 256-byte aligned and
// have 64 guard bytes before and after.
class DeviceArena {
 public:
  explicit DeviceArena(size_t bytes) : buffer_(bytes) {}
  void reset() { used_ = 0; }
  // A piece of `bytes`; throws when the arena is full.
  std::byte* take(size_t bytes);
  static constexpr size_t kGuard = 64;
  // The whole allocation (one cudaMalloc / hipMalloc).
  void* base() const { return buffer_.data(); }
  size_t bytes() const { return buffer_.bytes(); }

 private:
  gpu::DeviceBuffer buffer_;
  size_t used_ = 0;
};

// A stream the test holds back: hold() makes it wait for the test's own flag, release() lets it
// go (also at destruction, before anything is freed: declare it after the buffers it guards).
class HeldStream {
 public:
  HeldStream();
  ~HeldStream();
  gpu::Stream get() const { return stream_.get(); }
  operator gpu::Stream() const { return get(); }
  void hold();
  void release();
  // True once everything queued so far has run; waits up to `seconds` for it.
  bool drains_within(int seconds) const;

 private:
  gpu::PinnedHostBuffer flag_;
  gpu::OwnedStream stream_;
  uint64_t holds_ = 0;
};

}  // namespace chorus::testing
