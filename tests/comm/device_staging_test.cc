// The pinned-host staging layouts (comm/device_staging.h), without a device: every plan stays
// inside its block, runs in place where the collective has an in-place form and passes the same
// validation as a call; and, run for real with host memory standing in for device memory (the
// copies become memcpy), a staged call leaves exactly the bytes a direct call leaves, for every
// collective, placement, root and world size.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device_staging.h"
#include "multiproc.h"
#include "validate.h"

namespace chorus::testing {
namespace {

constexpr Collective kStaged[] = {
    Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather,
    Collective::kBroadcast, Collective::kReduce,        Collective::kGather,
    Collective::kScatter,   Collective::kAllToAll,      Collective::kSendRecv,
    Collective::kSend,      Collective::kRecv,
};

bool has_in_place(Collective c) {
  return c != Collective::kAllToAll && c != Collective::kSendRecv && c != Collective::kSend &&
         c != Collective::kRecv;
}

// One rank's buffers for a call: `send` and `recv` of n * count elements each (in place: recv
// only).
struct Buffers {
  std::vector<std::byte> send, recv;
};

// The arguments of `coll` on this rank over `b`, with NCCL's in-place layouts when `in_place`.
// Point-to-point: rank r sends to r + 1 and receives from r - 1 (send_recv); plain send and recv
// pair even ranks with the next odd one.
algo::CollArgs make_args(Collective coll, int rank, int n, size_t count, bool in_place, int root,
                         Buffers& b) {
  algo::CollArgs a;
  a.coll = coll;
  a.count = count;
  a.dtype = DataType::kI32;
  a.op = ReduceOp::kSum;
  a.root = root;
  const size_t es = dtype_size(a.dtype);
  const size_t c = count * es;
  const size_t r = static_cast<size_t>(rank);
  std::byte* s = b.send.data();
  std::byte* v = b.recv.data();
  a.send = s;
  a.recv = v;
  const bool is_root = rank == root;
  switch (coll) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
      if (in_place) a.send = v;
      break;
    case Collective::kReduce:
      if (in_place) a.send = v;
      if (!is_root) a.recv = nullptr;
      break;
    case Collective::kReduceScatter:
      if (in_place) {
        a.send = v;
        a.recv = v + r * c;
      }
      break;
    case Collective::kAllGather:
      if (in_place) a.send = v + r * c;
      break;
    case Collective::kGather:
      if (in_place && is_root) a.send = v + r * c;
      if (!is_root) a.recv = nullptr;
      break;
    case Collective::kScatter:
      if (in_place && is_root) {
        a.send = v;
        a.recv = v + r * c;
      }
      if (!is_root) a.send = nullptr;
      break;
    case Collective::kSendRecv:
      a.peer = (rank + 1) % n;
      a.recv_peer = (rank + n - 1) % n;
      a.recv_count = count;
      break;
    case Collective::kSend:
    case Collective::kRecv:
      a.peer = rank % 2 == 0 ? rank + 1 : rank - 1;
      if (rank % 2 == 1) {
        a.coll = Collective::kRecv;
        a.send = nullptr;
      } else {
        a.coll = Collective::kSend;
        a.recv = nullptr;
      }
      break;
    default:
      break;
  }
  return a;
}

void call(Communicator& comm, const algo::CollArgs& a) {
  switch (a.coll) {
    case Collective::kAllReduce:
      return comm.all_reduce(a.send, a.recv, a.count, a.dtype, a.op);
    case Collective::kReduceScatter:
      return comm.reduce_scatter(a.send, a.recv, a.count, a.dtype, a.op);
    case Collective::kAllGather:
      return comm.all_gather(a.send, a.recv, a.count, a.dtype);
    case Collective::kBroadcast:
      return comm.broadcast(a.send, a.recv, a.count, a.dtype, a.root);
    case Collective::kReduce:
      return comm.reduce(a.send, a.recv, a.count, a.dtype, a.op, a.root);
    case Collective::kGather:
      return comm.gather(a.send, a.recv, a.count, a.dtype, a.root);
    case Collective::kScatter:
      return comm.scatter(a.send, a.recv, a.count, a.dtype, a.root);
    case Collective::kAllToAll:
      return comm.all_to_all(a.send, a.recv, a.count, a.dtype);
    case Collective::kSend:
      return comm.send(a.send, a.count, a.dtype, a.peer);
    case Collective::kRecv:
      (void)comm.recv(a.recv, a.count, a.dtype, a.peer);
      return;
    case Collective::kSendRecv:
      return comm.send_recv(a.send, a.count, a.peer, a.recv, a.recv_count, a.recv_peer, a.dtype);
    default:
      FAIL() << "no staged form of " << to_string(a.coll);
  }
}

Buffers filled(int rank, int n, size_t count) {
  const size_t elems = static_cast<size_t>(n) * count;
  Buffers b{std::vector<std::byte>(elems * 4), std::vector<std::byte>(elems * 4)};
  for (size_t i = 0; i < elems; ++i) {
    const int32_t s = static_cast<int32_t>((static_cast<size_t>(rank) * 131 + i * 17) % 97) - 48;
    const int32_t v = static_cast<int32_t>((static_cast<size_t>(rank) * 7 + i * 3) % 89) - 44;
    std::memcpy(b.send.data() + 4 * i, &s, 4);
    std::memcpy(b.recv.data() + 4 * i, &v, 4);
  }
  return b;
}

// Whether the staged call is the collective's in-place form.
bool staged_in_place(const algo::CollArgs& s, int rank) {
  const size_t c = s.bytes();
  const bool root = rank == s.root;
  switch (s.coll) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
      return s.send == s.recv;
    case Collective::kReduce:
      return !root || s.send == s.recv;
    case Collective::kReduceScatter:
      return s.send + rank * c == s.recv;
    case Collective::kAllGather:
      return s.send == s.recv + rank * c;
    case Collective::kGather:
      return !root || s.send == s.recv + rank * c;
    case Collective::kScatter:
      return !root || s.recv == s.send + rank * c;
    default:
      return true;
  }
}

TEST(DeviceStaging, PlansStayInTheirBlockRunInPlaceAndValidate) {
  for (int n : {1, 2, 3, 4, 5}) {
    for (int rank = 0; rank < n; ++rank) {
      for (Collective coll : kStaged) {
        if (n == 1 && (coll == Collective::kSendRecv || coll == Collective::kSend)) continue;
        if ((coll == Collective::kSend || coll == Collective::kRecv) && n % 2 == 1) continue;
        for (size_t count : {0, 1, 7, 1001}) {
          for (bool in_place : {false, true}) {
            if (in_place && !has_in_place(coll)) continue;
            for (int root : {0, n - 1}) {
              Buffers b = filled(rank, n, count);
              const algo::CollArgs a = make_args(coll, rank, n, count, in_place, root, b);
              SCOPED_TRACE(::testing::Message()
                           << to_string(a.coll) << " n=" << n << " rank=" << rank
                           << " count=" << count << " in_place=" << in_place << " root=" << root);
              ASSERT_NO_THROW(validate(a, rank, n));
              const StagingPlan p = plan_staging(a, rank, n);
              if (p.in) EXPECT_LE(p.in->offset + p.in->bytes, p.bytes);
              if (p.out) EXPECT_LE(p.out->offset + p.out->bytes, p.bytes);
              std::vector<std::byte> block(p.bytes + 1);
              const algo::CollArgs s = staged_args(a, p, block.data());
              EXPECT_NO_THROW(validate(s, rank, n));
              EXPECT_TRUE(staged_in_place(s, rank));
              EXPECT_FALSE(validate_memory(a, rank, n).device);
            }
          }
        }
      }
    }
  }
}

class DeviceStagingRun : public ::testing::TestWithParam<int> {};

// Host memory stands in for device memory; the copies a stream would make become memcpy.
TEST_P(DeviceStagingRun, StagedCallLeavesTheBytesOfADirectCall) {
  const int n = GetParam();
  run_ranks(n, [n](Communicator& comm) {
    const int rank = comm.rank();
    for (Collective coll : kStaged) {
      if (n == 1 && (coll == Collective::kSendRecv || coll == Collective::kSend)) continue;
      if ((coll == Collective::kSend || coll == Collective::kRecv) && n % 2 == 1) continue;
      for (size_t count : {0, 1, 7, 1001, 65537}) {
        for (bool in_place : {false, true}) {
          if (in_place && !has_in_place(coll)) continue;
          for (int root : {0, n - 1}) {
            Buffers direct = filled(rank, n, count);
            call(comm, make_args(coll, rank, n, count, in_place, root, direct));

            Buffers staged = filled(rank, n, count);
            const algo::CollArgs a = make_args(coll, rank, n, count, in_place, root, staged);
            const StagingPlan p = plan_staging(a, rank, n);
            std::vector<std::byte> block(p.bytes + 64, std::byte{0x5a});
            if (p.in) std::memcpy(block.data() + p.in->offset, p.in->src, p.in->bytes);
            call(comm, staged_args(a, p, block.data()));
            if (p.out) std::memcpy(p.out->dst, block.data() + p.out->offset, p.out->bytes);

            const std::string what = ::testing::PrintToString(to_string(a.coll)) + " count " +
                                     std::to_string(count) + (in_place ? " in place" : "") +
                                     " root " + std::to_string(root) + " rank " +
                                     std::to_string(rank);
            EXPECT_TRUE(direct.send == staged.send) << what << ": send differs";
            EXPECT_TRUE(direct.recv == staged.recv) << what << ": recv differs";
            for (size_t i = p.bytes; i < block.size(); ++i)
              ASSERT_EQ(block[i], std::byte{0x5a}) << what << ": wrote past the staging block";
            if (::testing::Test::HasFailure()) return;
          }
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, DeviceStagingRun, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

}  // namespace
}  // namespace chorus::testing
