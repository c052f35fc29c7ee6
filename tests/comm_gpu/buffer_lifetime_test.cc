// The lifetime rule of the IPC path (docs/GPU.md, "Buffer lifetime"): an application may free its
// device buffers between collectives and allocate new ones, of the same size (the runtime then
// usually hands back the same address) or another, and every result stays exact; and memory it
// registers goes zero copy until a collective deregistration, after which it may be freed and
// allocated again too. On 2 and 4 ranks, on the IPC path and on pinned-host staging. Pieces of
// 1 MiB (CHORUS_GPU_IPC_CHUNK_BYTES) so that the larger messages cross the outbox in several
// pieces and both of its chunks.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "device_cases.h"
#include "gpu_world.h"

namespace chorus::testing {
namespace {

class GpuBufferLifetime : public GpuPathWorld {
 protected:
  // Each round allocates one arena (one device allocation), runs an all-reduce, an all-gather, a
  // broadcast and a send-receive on it, and frees it; `registered`: the arena is registered for
  // the round and deregistered (collectively) before it is freed.
  void run(bool registered) {
    const int n = world();
    if (n == 1) GTEST_SKIP() << "one rank moves nothing between processes";
    // Element counts of f32 per round: the same size twice (same address, usually), smaller,
    // odd, larger than two outbox chunks, then the first size again.
    const std::vector<size_t> counts = {1 << 20, 1 << 20,       (1 << 18) + 3,
                                        1001,    (3 << 19) + 5, 1 << 20};
    RunOptions options;
    options.env["CHORUS_GPU_IPC_CHUNK_BYTES"] = std::to_string(1 << 20);
    run_ranks(
        n,
        [&](Communicator& comm) {
          use_rank_device();
          gpu::OwnedStream stream;
          const void* previous = nullptr;
          int reused = 0, salt = 100;
          for (size_t count : counts) {
            DeviceArena memory(arena_bytes_for(count, DataType::kF32, n));
            reused += memory.base() == previous;
            previous = memory.base();
            if (registered) comm.register_device_memory(memory.base(), memory.bytes());
            for (Collective coll : {Collective::kAllReduce, Collective::kAllGather,
                                    Collective::kBroadcast, Collective::kSendRecv}) {
              memory.reset();
              run_device_case(comm,
                              {coll, DataType::kF32, ReduceOp::kSum, count, false, n - 1, ++salt,
                               Issue::kStream},
                              memory, stream);
              if (::testing::Test::HasFailure()) return;
            }
            comm.synchronize();
            if (registered) comm.deregister_device_memory(memory.base());
          }  // the arena is freed here, every round
          if (comm.rank() == 0)
            std::printf("rank 0: %d of %zu allocations came back at the address just freed\n",
                        reused, counts.size() - 1);
        },
        options);
  }
};

TEST_P(GpuBufferLifetime, FreedAndReallocatedBuffersStayExact) { run(false); }
TEST_P(GpuBufferLifetime, RegisteredBuffersDeregisteredThenFreed) { run(true); }

INSTANTIATE_TEST_SUITE_P(World, GpuBufferLifetime, ::testing::ValuesIn(worlds_and_paths()),
                         path_world_name);

}  // namespace
}  // namespace chorus::testing
