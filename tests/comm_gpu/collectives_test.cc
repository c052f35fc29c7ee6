// Every collective and point-to-point call on device buffers, on 1, 2 and 4 ranks sharing the
// host's GPUs (several ranks per GPU when there are fewer GPUs than ranks), over the IPC path and
// over pinned-host staging (CHORUS_GPU_PATH=ipc / staging), checked exactly
// against the reference: f32, f64, f16, bf16 and i32; sum, max and avg; counts 0, 1, odd and
// not divisible by the world size, and 16 MiB; in place and out of place; roots 0 and n-1; the
// stream-ordered, plain blocking and plain async forms. Then ranks that mix device and host
// buffers in one collective, and the polling-kernel way of holding a stream.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "device_cases.h"
#include "gpu_world.h"

namespace chorus::testing {
namespace {

constexpr Collective kCollectives[] = {
    Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather,
    Collective::kBroadcast, Collective::kReduce,        Collective::kGather,
    Collective::kScatter,   Collective::kAllToAll,
};
constexpr DataType kDtypes[] = {DataType::kF32, DataType::kF64, DataType::kF16, DataType::kBF16,
                                DataType::kI32};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg};
constexpr size_t kCounts[] = {0, 1, 7, 1001};
constexpr size_t kLargeBytes = size_t{16} << 20;

bool reduces(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}
bool rooted(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather ||
         c == Collective::kScatter;
}

// The small-count product for one collective on n ranks; the call form cycles with the salt.
std::vector<DeviceCase> matrix(Collective coll, int n) {
  std::vector<DeviceCase> cases;
  const std::vector<ReduceOp> ops = reduces(coll)
                                        ? std::vector<ReduceOp>(std::begin(kOps), std::end(kOps))
                                        : std::vector<ReduceOp>{ReduceOp::kSum};
  int salt = 0;
  for (int root : rooted(coll) ? std::vector<int>{0, n - 1} : std::vector<int>{0}) {
    for (bool in_place : {false, true}) {
      if (in_place && coll == Collective::kAllToAll) continue;
      for (DataType dtype : kDtypes)
        for (ReduceOp op : ops)
          for (size_t count : kCounts) {
            ++salt;
            cases.push_back(
                {coll, dtype, op, count, in_place, root, salt, static_cast<Issue>(salt % 3)});
          }
    }
    if (n == 1) break;
  }
  return cases;
}

// 16 MiB per rank buffer (the total for the collectives whose size is the total over ranks).
DeviceCase large(Collective coll, DataType dtype, ReduceOp op, int n, bool in_place) {
  const bool total = coll == Collective::kReduceScatter || coll == Collective::kAllGather ||
                     coll == Collective::kGather || coll == Collective::kScatter ||
                     coll == Collective::kAllToAll;
  const size_t count = kLargeBytes / dtype_size(dtype) / (total ? static_cast<size_t>(n) : 1);
  return {coll, dtype, op, count, in_place, n - 1, 7, Issue::kStream};
}

class GpuCollectives : public GpuPathWorld {
 protected:
  // Runs the cases on n ranks, every rank on its device (or host memory where `host_rank` says).
  void run(const std::vector<DeviceCase>& cases, const std::function<bool(int)>& host_rank = {},
           const RunOptions& options = {}) {
    const int n = world();
    size_t arena = 0;
    for (const DeviceCase& k : cases) arena = std::max(arena, arena_bytes_for(k.count, k.dtype, n));
    run_ranks(
        n,
        [&](Communicator& comm) {
          use_rank_device();
          DeviceArena memory(arena);
          gpu::OwnedStream stream;
          for (DeviceCase k : cases) {
            k.host_memory = host_rank && host_rank(comm.rank());
            run_device_case(comm, k, memory, stream);
            if (::testing::Test::HasFailure()) return;  // one clear failure, not a cascade
          }
          comm.synchronize();
        },
        options);
  }
};

TEST_P(GpuCollectives, AllReduce) { run(matrix(Collective::kAllReduce, world())); }
TEST_P(GpuCollectives, ReduceScatter) { run(matrix(Collective::kReduceScatter, world())); }
TEST_P(GpuCollectives, AllGather) { run(matrix(Collective::kAllGather, world())); }
TEST_P(GpuCollectives, Broadcast) { run(matrix(Collective::kBroadcast, world())); }
TEST_P(GpuCollectives, Reduce) { run(matrix(Collective::kReduce, world())); }
TEST_P(GpuCollectives, Gather) { run(matrix(Collective::kGather, world())); }
TEST_P(GpuCollectives, Scatter) { run(matrix(Collective::kScatter, world())); }
TEST_P(GpuCollectives, AllToAll) { run(matrix(Collective::kAllToAll, world())); }

TEST_P(GpuCollectives, Large) {
  const int n = world();
  std::vector<DeviceCase> cases;
  for (Collective coll : kCollectives) {
    cases.push_back(large(coll, DataType::kF32, ReduceOp::kSum, n, false));
    if (coll != Collective::kAllToAll)
      cases.push_back(large(coll, DataType::kF32, ReduceOp::kSum, n, true));
  }
  cases.push_back(large(Collective::kAllReduce, DataType::kBF16, ReduceOp::kAvg, n, false));
  cases.push_back(large(Collective::kAllReduce, DataType::kF64, ReduceOp::kMax, n, true));
  cases.push_back(large(Collective::kReduceScatter, DataType::kF16, ReduceOp::kSum, n, false));
  run(cases);
}

TEST_P(GpuCollectives, PointToPoint) {
  const int n = world();
  if (n == 1) GTEST_SKIP() << "point-to-point needs a peer";
  std::vector<DeviceCase> cases;
  int salt = 0;
  for (Collective coll : {Collective::kSendRecv, Collective::kSend})
    for (DataType dtype : kDtypes)
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}, (size_t{1} << 20) + 3}) {
        ++salt;
        cases.push_back(
            {coll, dtype, ReduceOp::kSum, count, false, 0, salt, static_cast<Issue>(salt % 3)});
      }
  run(cases);
}

// Even ranks pass device buffers, odd ranks host buffers (with the stream, or plain), in the same
// collectives: on the staging path the wire is host memory either way; on the IPC path device
// ranks send device rendezvous that host ranks copy out, and take host ranks' messages onto the
// device.
TEST_P(GpuCollectives, RanksMixDeviceAndHostBuffers) {
  const int n = world();
  if (n == 1) GTEST_SKIP() << "needs two ranks";
  std::vector<DeviceCase> cases;
  int salt = 0;
  for (Collective coll : kCollectives)
    for (bool in_place : {false, true}) {
      if (in_place && coll == Collective::kAllToAll) continue;
      for (size_t count : {size_t{1}, size_t{1001}}) {
        ++salt;
        cases.push_back({coll, DataType::kF32, ReduceOp::kSum, count, in_place, n - 1, salt,
                         static_cast<Issue>(salt % 3)});
      }
    }
  for (size_t count : {size_t{7}, size_t{1} << 20}) {
    cases.push_back({Collective::kSendRecv, DataType::kBF16, ReduceOp::kSum, count, false, 0,
                     ++salt, Issue::kStream});
  }
  run(cases, [](int rank) { return rank % 2 == 1; });
}

// The same all-reduces with the stream held by a polling kernel instead of a stream memory
// operation (the fallback for devices without them).
TEST_P(GpuCollectives, WaitKernelFallback) {
  const int n = world();
  std::vector<DeviceCase> cases;
  int salt = 0;
  for (DataType dtype : {DataType::kF32, DataType::kBF16})
    for (size_t count : {size_t{1}, size_t{1001}, size_t{1} << 20})
      cases.push_back(
          {Collective::kAllReduce, dtype, ReduceOp::kSum, count, false, 0, ++salt, Issue::kStream});
  cases.push_back(large(Collective::kAllGather, DataType::kF32, ReduceOp::kSum, n, true));
  RunOptions options;
  options.env["CHORUS_GPU_STREAM_WAIT"] = "kernel";
  run(cases, {}, options);
}

// CHORUS_GPU_PATH=ipc takes the IPC path or refuses the call, so these collectives succeeding
// on 2 and 4 ranks says the IPC path ran; where INFO logging is on in the ranks, their log says
// so too. Under auto, one host and one set of visible devices choose it as well.
class GpuIpcPath : public GpuWorld, public ::testing::WithParamInterface<std::string> {};

TEST_P(GpuIpcPath, IsChosen) {
  for (int n : {2, 4}) {
    RunOptions options;
    options.env["CHORUS_GPU_PATH"] = GetParam();
    options.env["CHORUS_DEBUG"] = "INFO";
    options.env["CHORUS_DEBUG_SUBSYS"] = "COLL";
    run_ranks(
        n,
        [n](Communicator& comm) {
          use_rank_device();
          DeviceArena memory(arena_bytes_for(1001, DataType::kBF16, n));
          gpu::OwnedStream stream;
          char path[] = "/tmp/chorus-ipc-log-XXXXXX";
          const int fd = ::mkstemp(path);
          ASSERT_GE(fd, 0);
          std::fflush(stderr);
          const int saved = ::dup(2);
          ::dup2(fd, 2);
          int salt = 0;
          for (Collective coll : {Collective::kAllReduce, Collective::kAllGather,
                                  Collective::kReduceScatter, Collective::kBroadcast})
            run_device_case(
                comm,
                {coll, DataType::kBF16, ReduceOp::kSum, 1001, false, n - 1, ++salt, Issue::kStream},
                memory, stream);
          comm.synchronize();
          std::fflush(stderr);
          ::dup2(saved, 2);
          ::close(saved);
          std::ifstream in(path);
          const std::string log((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
          ::close(fd);
          ::unlink(path);
          if (log.find("stream-ordered operations on device") != std::string::npos) {
            EXPECT_NE(log.find("device buffers move by IPC"), std::string::npos) << log;
          }
        },
        options);
  }
}

INSTANTIATE_TEST_SUITE_P(Setting, GpuIpcPath, ::testing::Values("ipc", "auto"),
                         [](const auto& info) { return info.param; });

INSTANTIATE_TEST_SUITE_P(World, GpuCollectives, ::testing::ValuesIn(worlds_and_paths()),
                         path_world_name);

}  // namespace
}  // namespace chorus::testing
