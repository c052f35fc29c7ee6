// Checks the buffer layouts, fills and checks of chorus-bench against a host reference of every
// collective: N simulated ranks fill their buffers, the reference computes every output from
// every input, and each rank's check must find no wrong element (and find the ones we break).
#include "chorus_bench/collective_case.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "chorus/error.h"

namespace chorus::bench {
namespace {

struct SimulatedRank {
  CollectiveCase c;
  std::vector<std::byte> send;
  std::vector<std::byte> recv;

  explicit SimulatedRank(const CaseParams& params)
      : c(params),
        send(c.send_elements() * dtype_size(params.dtype)),
        recv(c.recv_elements() * dtype_size(params.dtype)) {
    c.fill(send.data(), recv.data());
  }
  // The pointers chorus-bench passes to the Communicator.
  const std::byte* send_ptr() const {
    const size_t esize = dtype_size(c.params().dtype);
    return c.in_place() ? recv.data() + c.send_offset() * esize : send.data();
  }
  std::byte* recv_ptr() { return recv.data() + c.recv_offset() * dtype_size(c.params().dtype); }
};

double fold(ReduceOp op, const std::vector<double>& values) {
  double acc = values[0];
  for (size_t k = 1; k < values.size(); ++k) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += values[k];
        break;
      case ReduceOp::kProd:
        acc *= values[k];
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, values[k]);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, values[k]);
        break;
      default:
        break;
    }
  }
  return op == ReduceOp::kAvg ? acc / static_cast<double>(values.size()) : acc;
}

// What each collective computes, from the API's description in communicator.h.
void reference(std::vector<SimulatedRank>& ranks) {
  const CaseParams& p = ranks[0].c.params();
  const int n = p.world_size;
  const size_t c = p.count;
  const DataType dtype = p.dtype;
  const bool total_input = p.collective == BenchCollective::kReduceScatter ||
                           p.collective == BenchCollective::kScatter ||
                           p.collective == BenchCollective::kAllToAll;
  // Read every input before writing any output: in place they share memory.
  std::vector<std::vector<double>> in(n, std::vector<double>(total_input ? n * c : c));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < in[r].size(); ++i) in[r][i] = load_value(dtype, ranks[r].send_ptr(), i);
  const auto reduce_at = [&](size_t i) {
    std::vector<double> values;
    for (int r = 0; r < n; ++r) values.push_back(in[r][i]);
    return fold(p.op, values);
  };
  const auto put = [&](int r, size_t i, double v) {
    store_value(dtype, ranks[r].recv_ptr(), i, static_cast<int64_t>(v));
  };
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < c; ++i) {
      switch (p.collective) {
        case BenchCollective::kAllReduce:
          put(r, i, reduce_at(i));
          break;
        case BenchCollective::kReduce:
          if (r == p.root) put(r, i, reduce_at(i));
          break;
        case BenchCollective::kReduceScatter:
          put(r, i, reduce_at(r * c + i));
          break;
        case BenchCollective::kAllGather:
          for (int j = 0; j < n; ++j) put(r, j * c + i, in[j][i]);
          break;
        case BenchCollective::kGather:
          if (r == p.root)
            for (int j = 0; j < n; ++j) put(r, j * c + i, in[j][i]);
          break;
        case BenchCollective::kBroadcast:
          put(r, i, in[p.root][i]);
          break;
        case BenchCollective::kScatter:
          put(r, i, in[p.root][r * c + i]);
          break;
        case BenchCollective::kAllToAll:
          for (int j = 0; j < n; ++j) put(r, j * c + i, in[j][r * c + i]);
          break;
        case BenchCollective::kSendRecv:
          put(r, i, in[(r + n - 1) % n][i]);
          break;
      }
    }
  }
}

bool has_output(const CaseParams& p) {
  const bool rooted =
      p.collective == BenchCollective::kReduce || p.collective == BenchCollective::kGather;
  return !rooted || p.rank == p.root;
}

std::vector<SimulatedRank> make_ranks(CaseParams params) {
  std::vector<SimulatedRank> ranks;
  for (int r = 0; r < params.world_size; ++r) {
    params.rank = r;
    ranks.emplace_back(params);
  }
  return ranks;
}

TEST(CollectiveCase, ReferenceResultsCheckCleanAndBrokenElementsAreCounted) {
  for (BenchCollective coll : kAllBenchCollectives)
    for (Placement placement : {Placement::kOutOfPlace, Placement::kInPlace}) {
      if (placement == Placement::kInPlace && !supports_in_place(coll)) continue;
      for (int n : {1, 2, 3, 4, 5})
        for (int root : {0, n - 1})
          for (DataType dtype : {DataType::kF32, DataType::kBF16, DataType::kI8, DataType::kU8})
            for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kAvg, ReduceOp::kMin}) {
              if (!reduces(coll) && op != ReduceOp::kSum) continue;
              SCOPED_TRACE(testing::Message()
                           << to_string(coll) << " " << to_string(placement) << " n=" << n
                           << " root=" << root << " " << to_string(dtype) << " " << to_string(op));
              const size_t count = 5;
              std::vector<SimulatedRank> ranks =
                  make_ranks({coll, placement, dtype, op, root, 0, n, count});
              reference(ranks);
              for (SimulatedRank& rank : ranks) {
                ASSERT_EQ(rank.c.count_wrong(rank.recv.data()), 0u)
                    << "rank " << rank.c.params().rank;
                if (!has_output(rank.c.params())) continue;
                // Break the last output element: exactly one wrong.
                const size_t outputs = coll == BenchCollective::kAllGather ||
                                               coll == BenchCollective::kGather ||
                                               coll == BenchCollective::kAllToAll
                                           ? n * count
                                           : count;
                fill_sentinel(dtype, rank.recv_ptr() + (outputs - 1) * dtype_size(dtype), 1);
                EXPECT_EQ(rank.c.count_wrong(rank.recv.data()), 1u);
              }
            }
    }
}

TEST(CollectiveCase, OutputsLeftUnwrittenAreAllWrong) {
  for (BenchCollective coll : kAllBenchCollectives) {
    std::vector<SimulatedRank> ranks =
        make_ranks({coll, Placement::kOutOfPlace, DataType::kF32, ReduceOp::kSum, 1, 0, 3, 4});
    for (SimulatedRank& rank : ranks) {
      const size_t outputs = has_output(rank.c.params()) ? rank.c.recv_elements() : 0;
      EXPECT_EQ(rank.c.count_wrong(rank.recv.data()), outputs) << to_string(coll);
    }
  }
}

TEST(CollectiveCase, InPlaceLayoutsFollowNccl) {
  const auto make = [](BenchCollective coll) {
    return CollectiveCase({coll, Placement::kInPlace, DataType::kF64, ReduceOp::kSum, 0, 2, 4, 10});
  };
  // reduce_scatter, scatter: the result is this rank's block of the n c buffer.
  for (BenchCollective coll : {BenchCollective::kReduceScatter, BenchCollective::kScatter}) {
    const CollectiveCase c = make(coll);
    EXPECT_EQ(c.send_elements(), 0u);
    EXPECT_EQ(c.recv_elements(), 40u);
    EXPECT_EQ(c.send_offset(), 0u);
    EXPECT_EQ(c.recv_offset(), 20u);
  }
  // all_gather, gather: the input is this rank's block of the n c buffer.
  for (BenchCollective coll : {BenchCollective::kAllGather, BenchCollective::kGather}) {
    const CollectiveCase c = make(coll);
    EXPECT_EQ(c.recv_elements(), 40u);
    EXPECT_EQ(c.send_offset(), 20u);
    EXPECT_EQ(c.recv_offset(), 0u);
  }
  for (BenchCollective coll :
       {BenchCollective::kAllReduce, BenchCollective::kBroadcast, BenchCollective::kReduce}) {
    const CollectiveCase c = make(coll);
    EXPECT_EQ(c.recv_elements(), 10u);
    EXPECT_EQ(c.send_offset(), 0u);
    EXPECT_EQ(c.recv_offset(), 0u);
  }
  EXPECT_THROW(make(BenchCollective::kAllToAll), InvalidArgument);
  EXPECT_THROW(make(BenchCollective::kSendRecv), InvalidArgument);
}

TEST(CollectiveCase, OutOfPlaceSizes) {
  const auto make = [](BenchCollective coll) {
    return CollectiveCase(
        {coll, Placement::kOutOfPlace, DataType::kF32, ReduceOp::kSum, 0, 1, 4, 10});
  };
  EXPECT_EQ(make(BenchCollective::kReduceScatter).send_elements(), 40u);
  EXPECT_EQ(make(BenchCollective::kReduceScatter).recv_elements(), 10u);
  EXPECT_EQ(make(BenchCollective::kAllGather).send_elements(), 10u);
  EXPECT_EQ(make(BenchCollective::kAllGather).recv_elements(), 40u);
  EXPECT_EQ(make(BenchCollective::kAllToAll).send_elements(), 40u);
  EXPECT_EQ(make(BenchCollective::kAllToAll).recv_elements(), 40u);
  EXPECT_EQ(make(BenchCollective::kSendRecv).send_elements(), 10u);
}

TEST(CollectiveCase, RejectsBadRankAndRoot) {
  EXPECT_THROW(CollectiveCase({BenchCollective::kBroadcast, Placement::kOutOfPlace, DataType::kF32,
                               ReduceOp::kSum, 4, 0, 4, 1}),
               InvalidArgument);
  EXPECT_THROW(CollectiveCase({BenchCollective::kAllReduce, Placement::kOutOfPlace, DataType::kF32,
                               ReduceOp::kSum, 0, 4, 4, 1}),
               InvalidArgument);
  // A root is ignored where there is none.
  EXPECT_NO_THROW(CollectiveCase({BenchCollective::kAllReduce, Placement::kOutOfPlace,
                                  DataType::kF32, ReduceOp::kSum, 9, 0, 4, 1}));
}

}  // namespace
}  // namespace chorus::bench
