// The IPC path for device buffers, in the parts that run without a device: the path selection
// (device_memory.h), the device rendezvous slot encoding, the outbox's chunk bookkeeping, the
// registered ranges, the cache of mapped peer allocations and the set-up agreement
// (shm_device.h), the shm transport refusing device memory where IPC is
// impossible, and the memory-operations seam of the algorithms: every algorithm run with a
// MemoryOps standing in for device memory (host memory behind it, the calls counted) leaves
// exactly the bytes the plain host run leaves.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "algo/algorithm.h"
#include "algo/registry.h"
#include "chorus/kernels/cpu.h"
#include "device_memory.h"
#include "exchange.h"
#include "multiproc.h"
#include "transport/factory.h"
#include "transport/registered_memory.h"
#include "transport/shm/shm_device.h"
#include "transport/shm/shm_transport.h"

namespace chorus::testing {
namespace {

// ---- path selection
// ------------------------------------------------------------------------------

TEST(GpuPathSelection, ParsesTheSetting) {
  EXPECT_EQ(parse_gpu_path("auto"), GpuPathSetting::kAuto);
  EXPECT_EQ(parse_gpu_path(""), GpuPathSetting::kAuto);
  EXPECT_EQ(parse_gpu_path("ipc"), GpuPathSetting::kIpc);
  EXPECT_EQ(parse_gpu_path("staging"), GpuPathSetting::kStaging);
  EXPECT_THROW(parse_gpu_path("nvlink"), InvalidArgument);
}

TEST(GpuPathSelection, IpcOnlyWithPeersAndATransportThatMovesDeviceMemory) {
  std::string why;
  EXPECT_EQ(choose_gpu_path(GpuPathSetting::kAuto, 4, true, "", &why), GpuPath::kIpc);
  EXPECT_EQ(choose_gpu_path(GpuPathSetting::kIpc, 2, true, "", &why), GpuPath::kIpc);
  EXPECT_EQ(choose_gpu_path(GpuPathSetting::kAuto, 4, false, "the ranks span hosts", &why),
            GpuPath::kStaging);
  EXPECT_EQ(why, "the ranks span hosts");
  EXPECT_EQ(choose_gpu_path(GpuPathSetting::kAuto, 1, true, "", &why), GpuPath::kStaging);
  EXPECT_EQ(choose_gpu_path(GpuPathSetting::kStaging, 4, true, "", &why), GpuPath::kStaging);
  EXPECT_EQ(why, "CHORUS_GPU_PATH=staging");
  // Forced IPC where it is impossible is refused, saying why; one rank has nothing to move.
  try {
    choose_gpu_path(GpuPathSetting::kIpc, 2, false, "rank 1 cannot use GPU IPC");
    ADD_FAILURE() << "CHORUS_GPU_PATH=ipc without IPC was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 cannot use GPU IPC"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(choose_gpu_path(GpuPathSetting::kIpc, 1, false, "x"), GpuPath::kStaging);
}

TEST(GpuPathSelection, RanksAgreeOnlyOnEqualNonEmptySignatures) {
  std::string why;
  const std::vector<std::string> same(4, "CUDA;CUDA_VISIBLE_DEVICES=(unset)");
  EXPECT_TRUE(transport::shm::signatures_allow_ipc(same, &why));
  std::vector<std::string> one_without = same;
  one_without[2].clear();
  EXPECT_FALSE(transport::shm::signatures_allow_ipc(one_without, &why));
  EXPECT_NE(why.find("rank 2"), std::string::npos) << why;
  std::vector<std::string> other_devices = same;
  other_devices[3] = "CUDA;CUDA_VISIBLE_DEVICES=3";
  EXPECT_FALSE(transport::shm::signatures_allow_ipc(other_devices, &why));
  EXPECT_NE(why.find("rank 3"), std::string::npos) << why;
}

TEST(GpuPathSelection, SignatureIsEmptyWithoutGpuSupportOrDriver) {
  const std::string sig = transport::shm::device_ipc_signature();
  if (gpu::backend() == gpu::Backend::kNone) EXPECT_TRUE(sig.empty()) << sig;
  EXPECT_LT(sig.size(), sizeof(transport::shm::SegmentHeader::gpu_signature));
}

// ---- the device rendezvous slot
// --------------------------------------------------------------------

TEST(DeviceRendezvousSlot, RoundTripsAndFitsTheSmallestSlot) {
  using namespace transport::shm;
  static_assert(kDeviceRendezvousPayload <= kMinSlotBytes,
                "CHORUS_SHM_SLOT_BYTES may be as small as kMinSlotBytes");
  alignas(64) std::byte slot[sizeof(SlotHeader) + kMinSlotBytes] = {};
  auto* h = reinterpret_cast<SlotHeader*>(slot);
  h->kind = SlotKind::kDeviceRendezvous;
  h->total = 12345;
  h->stamp.seq = 77;
  DeviceRendezvous d;
  for (size_t i = 0; i < d.handle.bytes.size(); ++i)
    d.handle.bytes[i] = static_cast<unsigned char>(i * 7 + 1);
  d.offset = (uint64_t{1} << 40) + 256;
  d.addr = 0x7f0012345600ull;
  d.piece_offset = (uint64_t{3} << 33) + 64;
  d.piece_bytes = (uint64_t{1} << 24) + 4;
  d.device = 7;
  d.origin = Origin::kRegistered;
  encode(d, h, slot + sizeof(SlotHeader));
  const DeviceRendezvous e = decode(h, slot + sizeof(SlotHeader));
  EXPECT_EQ(e.handle.bytes, d.handle.bytes);
  EXPECT_EQ(e.offset, d.offset);
  EXPECT_EQ(e.addr, d.addr);
  EXPECT_EQ(e.piece_offset, d.piece_offset);
  EXPECT_EQ(e.piece_bytes, d.piece_bytes);
  EXPECT_EQ(e.device, d.device);
  EXPECT_EQ(e.origin, Origin::kRegistered);
  // What the slot's owner wrote stays.
  EXPECT_EQ(h->kind, SlotKind::kDeviceRendezvous);
  EXPECT_EQ(h->total, 12345u);
  EXPECT_EQ(h->stamp.seq, 77u);
}

TEST(DeviceRendezvousSlot, SlotsSmallerThanARendezvousAreRefused) {
  ::setenv("CHORUS_SHM_SLOT_BYTES", "64", 1);
  EXPECT_THROW(transport::ShmOptions::from_env(), InvalidArgument);
  ::setenv("CHORUS_SHM_SLOT_BYTES", "128", 1);
  EXPECT_EQ(transport::ShmOptions::from_env().slot_bytes, 128u);
  ::unsetenv("CHORUS_SHM_SLOT_BYTES");
}

// ---- the outbox: a chunk is reused only once the receiver has acknowledged its piece
// ------------------------------------------------------------

TEST(OutboxChunks, PiecesTakeTheChunksInTurnAndWaitForTheirAcknowledgement) {
  transport::shm::OutboxChunks chunks(1000);
  // A message of 2500 bytes: pieces of 1000, 1000, 500.
  EXPECT_EQ(chunks.piece_bytes(0, 2500), 1000u);
  EXPECT_EQ(chunks.piece_bytes(2000, 2500), 500u);
  uint64_t acknowledged = 0;
  ASSERT_EQ(chunks.next_free(acknowledged), 0);
  chunks.carry(0, 1);  // piece 1 in chunk 0
  ASSERT_EQ(chunks.next_free(acknowledged), 1);
  EXPECT_EQ(chunks.offset_of(1), 1000u);
  chunks.carry(1, 2);  // piece 2 in chunk 1
  // Chunk 0 still holds piece 1 until the receiver acknowledges it.
  EXPECT_EQ(chunks.next_free(acknowledged), -1);
  acknowledged = 1;
  ASSERT_EQ(chunks.next_free(acknowledged), 0);
  chunks.carry(0, 3);
  // Chunk 1 (piece 2) is next and not acknowledged: the acknowledgement of piece 1 alone does
  // not free it.
  EXPECT_EQ(chunks.next_free(acknowledged), -1);
  acknowledged = 2;
  EXPECT_EQ(chunks.next_free(acknowledged), 1);
}

// ---- registered device memory
// ---------------------------------------------------------------------

TEST(RegisteredRanges, ContainsOnlyWhatLiesInsideOneRange) {
  transport::RegisteredRanges r;
  alignas(64) static std::byte a[4096], b[4096];
  EXPECT_TRUE(r.empty());
  r.add(a, 1024);
  r.add(b + 512, 1024);
  EXPECT_TRUE(r.contains(a, 1024));
  EXPECT_TRUE(r.contains(a + 1000, 24));
  EXPECT_FALSE(r.contains(a + 1000, 25));  // runs past the end
  EXPECT_FALSE(r.contains(a + 1024, 1));   // just past it
  EXPECT_FALSE(r.contains(b, 1));          // before the second range
  EXPECT_TRUE(r.contains(b + 512, 1));
  EXPECT_TRUE(r.contains(b + 1535, 1));
  EXPECT_FALSE(r.contains(b + 1536, 1));
  EXPECT_FALSE(r.remove(a + 1));  // a range is named by its start
  EXPECT_TRUE(r.remove(a));
  EXPECT_FALSE(r.contains(a, 1));
  EXPECT_TRUE(r.contains(b + 512, 1024));
}

TEST(RegisteredRanges, RefusesEmptyAndOverlappingRanges) {
  transport::RegisteredRanges r;
  alignas(64) static std::byte a[4096];
  EXPECT_THROW(r.add(a, 0), InvalidArgument);
  EXPECT_THROW(r.add(nullptr, 64), InvalidArgument);
  r.add(a + 1024, 1024);
  EXPECT_THROW(r.add(a + 2047, 8), InvalidArgument);
  EXPECT_THROW(r.add(a + 1000, 25), InvalidArgument);
  EXPECT_THROW(r.add(a, 4096), InvalidArgument);
  r.add(a + 2048, 8);  // touching is not overlapping
  r.add(a + 1000, 24);
  EXPECT_TRUE(r.contains(a + 1000, 24));
  EXPECT_TRUE(r.contains(a + 1024, 1024));
  EXPECT_FALSE(r.contains(a + 1000, 25));  // spans two adjacent ranges: not inside one
}

// The Communicator's registration calls, where device buffers do not move through IPC (no device
// here): the bookkeeping and the refusals are the same, and deregistration is a collective that
// completes on every rank.
TEST(RegisteredDeviceMemory, BookkeepingAndCollectiveDeregistration) {
  if (gpu::probe_devices().count > 0) GTEST_SKIP() << "comm_gpu_test covers this with a device";
  run_ranks(3, [](Communicator& comm) {
    std::vector<float> a(1000, 1.0f), b(64, 2.0f);
    comm.register_device_memory(a.data(), a.size() * sizeof(float));
    EXPECT_THROW(comm.register_device_memory(a.data() + 10, 4), InvalidArgument);  // overlaps
    EXPECT_THROW(comm.register_device_memory(b.data(), 0), InvalidArgument);
    comm.register_device_memory(b.data(), b.size() * sizeof(float));
    // Refused before any communication: a pointer this rank never registered.
    EXPECT_THROW(comm.deregister_device_memory(a.data() + 1), InvalidArgument);
    comm.all_reduce(a, ReduceOp::kSum);
    EXPECT_EQ(a[999], 3.0f);
    // Every rank deregisters: rank 0 a pointer, the others nothing of theirs.
    comm.deregister_device_memory(comm.rank() == 0 ? a.data() : nullptr);
    comm.deregister_device_memory(b.data());
    EXPECT_THROW(comm.deregister_device_memory(b.data()), InvalidArgument);  // already gone
    // Re-registering what was deregistered is allowed; the communicator works on.
    comm.register_device_memory(b.data(), b.size() * sizeof(float));
    comm.all_reduce(b, ReduceOp::kSum);
    EXPECT_EQ(b[0], 6.0f);
  });
}

// ---- the cache of mapped peer allocations
// ----------------------------------------------------------

TEST(IpcMappingCache, EvictsTheLeastRecentlyUsed) {
  transport::shm::LruCache<int, std::unique_ptr<int>> cache(2);
  cache.insert(1, std::make_unique<int>(10));
  cache.insert(2, std::make_unique<int>(20));
  ASSERT_NE(cache.find(1), nullptr);  // 1 is now the most recent
  cache.insert(3, std::make_unique<int>(30));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_TRUE(cache.contains(1));
  EXPECT_FALSE(cache.contains(2));
  EXPECT_TRUE(cache.contains(3));
  EXPECT_EQ(**cache.find(3), 30);
  cache.insert(4, std::make_unique<int>(40));  // 1 was used before 3
  EXPECT_FALSE(cache.contains(1));
  EXPECT_TRUE(cache.contains(3) && cache.contains(4));
}

TEST(IpcMappingCache, KeysAreHandleAndDevice) {
  using transport::shm::MappingKey;
  transport::shm::LruCache<MappingKey, int> cache(4);
  MappingKey a;
  a.handle[0] = 1;
  a.device = 0;
  MappingKey b = a;
  b.device = 1;  // the same allocation mapped on another device is another mapping
  MappingKey c = a;
  c.handle[63] = 9;
  cache.insert(a, 1);
  cache.insert(b, 2);
  EXPECT_EQ(*cache.find(a), 1);
  EXPECT_EQ(*cache.find(b), 2);
  EXPECT_EQ(cache.find(c), nullptr);
}

// ---- ranks wired by hand: a transport and an Exchange per rank
// --------------------------------------

TEST(ShmDeviceMemory, RefusedWhereIpcIsImpossible) {
  if (!transport::shm::device_ipc_signature().empty())
    GTEST_SKIP() << "this machine has a GPU driver: IPC may be possible";
  run_wired(2, [](int, transport::Wiring& w, Exchange&) {
    transport::Transport& t = *w.transport;
    const transport::Capabilities& caps = t.capabilities();
    EXPECT_FALSE(caps.moves_device_memory);
    EXPECT_NE(caps.host_memory_only.find("cannot use GPU IPC"), std::string::npos)
        << caps.host_memory_only;
    transport::DeviceContext device{0, {}};
    EXPECT_THROW(t.set_device_memory(&device), Error);
    EXPECT_NO_THROW(t.set_device_memory(nullptr));
  });
}

// ---- the memory-operations seam
// ---------------------------------------------------------------------

// Host memory behind the MemoryOps interface, every call counted: what an algorithm does to its
// buffers through the seam is then visible, and must give the host run's bytes.
class CountingHostOps final : public algo::MemoryOps {
 public:
  void copy(std::byte* dst, const std::byte* src, size_t bytes) override {
    ++calls;
    std::memcpy(dst, src, bytes);
  }
  void reduce_n(DataType dtype, ReduceOp op, std::byte* dst, const void* const* srcs, int n,
                size_t count) override {
    ++calls;
    kernels::reduce_n(dtype, op, dst, srcs, n, count);
  }
  void divide(DataType dtype, std::byte* dst, const std::byte* src, size_t count,
              int64_t divisor) override {
    ++calls;
    kernels::divide(dtype, dst, src, count, divisor);
  }
  std::byte* scratch(size_t slot, size_t bytes) override {
    if (buffers_.size() <= slot) buffers_.resize(slot + 1);
    if (buffers_[slot].size() < bytes) buffers_[slot].resize(bytes);
    ++scratch_calls;
    return buffers_[slot].data();
  }
  int calls = 0;
  int scratch_calls = 0;

 private:
  std::vector<std::vector<std::byte>> buffers_;
};

bool reduces(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}

// Send and recv for `coll` on this rank: out of place, or NCCL's in-place layout.
void place(algo::CollArgs& a, int rank, int n, bool in_place, std::vector<std::byte>& send,
           std::vector<std::byte>& recv) {
  const size_t b = a.bytes();
  a.send = send.data();
  a.recv = recv.data();
  const bool root = rank == a.root;
  const size_t r = static_cast<size_t>(rank);
  switch (a.coll) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
      if (in_place) a.send = a.recv;
      break;
    case Collective::kReduce:
      if (!root)
        a.recv = nullptr;
      else if (in_place)
        a.send = a.recv;
      break;
    case Collective::kReduceScatter:
      if (in_place) a.recv = send.data() + r * b;
      break;
    case Collective::kAllGather:
      if (in_place) a.send = recv.data() + r * b;
      break;
    case Collective::kGather:
      if (!root)
        a.recv = nullptr;
      else if (in_place)
        a.send = recv.data() + r * b;
      break;
    case Collective::kScatter:
      if (!root)
        a.send = nullptr;
      else if (in_place)
        a.recv = send.data() + r * b;
      break;
    default:
      break;
  }
  (void)n;
}

// Every algorithm (with `rank_order`: every reduction that folds in rank order, bf16 as well as
// i32, which takes the direct algorithms' step-by-step rounding and the two-shot's partial in
// scratch) run on host memory and through the seam, compared byte for byte.
void check_the_seam(bool rank_order) {
  constexpr int n = 3;
  run_wired(n, [rank_order](int rank, transport::Wiring&, Exchange& ex) {
    const std::vector<int> host_of(n, 0);
    algo::Scratch scratch;
    CountingHostOps ops;
    int64_t seq = 0;
    int cases = 0;
    for (const algo::AlgoEntry& e : algo::all_algorithms()) {
      if (!algo::runs_on_hosts(e.algo, 1)) continue;
      const Collective coll = e.coll;
      if (coll == Collective::kBarrier || coll == Collective::kSend || coll == Collective::kRecv ||
          coll == Collective::kSendRecv)
        continue;
      if (rank_order && (!reduces(coll) || !algo::folds_in_rank_order(coll, e.algo))) continue;
      const std::vector<DataType> dtypes =
          rank_order ? std::vector<DataType>{DataType::kI32, DataType::kBF16}
                     : std::vector<DataType>{DataType::kI32};
      for (DataType dtype : dtypes)
        for (ReduceOp op : reduces(coll) ? std::vector<ReduceOp>{ReduceOp::kSum, ReduceOp::kAvg}
                                         : std::vector<ReduceOp>{ReduceOp::kSum})
          for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}, size_t{70001}})
            for (bool in_place : {false, true})
              for (int root : {0, n - 1}) {
                if (in_place && coll == Collective::kAllToAll) continue;
                algo::CollArgs a;
                a.coll = coll;
                a.count = count;
                a.dtype = dtype;
                a.op = op;
                a.root = root;
                const size_t total = n * count * dtype_size(dtype);
                // Inputs unique per rank and index; the host run and the seam run start alike.
                std::vector<std::byte> send[2], recv[2];
                for (int run = 0; run < 2; ++run) {
                  send[run].assign(total + 64, std::byte{0});
                  recv[run].assign(total + 64, std::byte{0x5a});
                  auto* s = reinterpret_cast<int32_t*>(send[run].data());
                  auto* v = reinterpret_cast<int32_t*>(recv[run].data());
                  // bf16: the same bytes, two elements per int32 (both runs use the same kernels).
                  for (size_t i = 0; i < n * count * dtype_size(dtype) / sizeof(int32_t); ++i) {
                    s[i] = static_cast<int32_t>(rank * 1000003 + i * 7 + 1);
                    v[i] = static_cast<int32_t>(rank * 999 + i * 3 + 2);
                  }
                }
                for (int run = 0; run < 2; ++run) {
                  algo::CollArgs r = a;
                  place(r, rank, n, in_place, send[run], recv[run]);
                  r.mem = run == 1 ? &ops : nullptr;
                  scratch.use_memory(r.mem);
                  transport::OpStamp stamp{static_cast<uint64_t>(++seq),
                                           count,
                                           static_cast<uint8_t>(coll),
                                           static_cast<uint8_t>(r.dtype),
                                           static_cast<uint8_t>(op),
                                           static_cast<uint8_t>(static_cast<int>(e.algo) + 1),
                                           root};
                  ex.begin("seam", seq, e.description, std::chrono::milliseconds(30000), stamp);
                  algo::Context ctx{rank, n, ex, scratch, 64 << 10, host_of, {}, {}};
                  ctx.rank_order = rank_order;
                  e.run(ctx, r);
                  scratch.use_memory(nullptr);
                }
                ++cases;
                EXPECT_EQ(send[0], send[1])
                    << to_string(coll) << "/" << algo::to_string(e.algo) << " " << to_string(dtype)
                    << " count " << count << " in_place " << in_place << " root " << root
                    << " rank " << rank << " rank_order " << rank_order;
                EXPECT_EQ(recv[0], recv[1])
                    << to_string(coll) << "/" << algo::to_string(e.algo) << " " << to_string(dtype)
                    << " count " << count << " in_place " << in_place << " root " << root
                    << " rank " << rank << " rank_order " << rank_order;
                if (::testing::Test::HasFailure()) return;
              }
    }
    EXPECT_GT(cases, 100);
    // The reducing algorithms reduce locally and the direct ones take scratch: through the seam.
    EXPECT_GT(ops.calls, 0);
    EXPECT_GT(ops.scratch_calls, 0);
  });
}

TEST(MemoryOpsSeam, EveryAlgorithmGivesTheHostBytes) { check_the_seam(false); }
TEST(MemoryOpsSeam, RankOrderedFoldsGiveTheHostBytes) { check_the_seam(true); }

}  // namespace
}  // namespace chorus::testing
