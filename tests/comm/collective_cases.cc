#include "collective_cases.h"

#include <gtest/gtest.h>

#include <sstream>

#include "algo/algorithm.h"
#include "algo/registry.h"
#include "reference.h"

namespace chorus::testing {
namespace {

// Arbitrary-but-unique data for data-movement collectives: the min/max generator's values.
int64_t payload(DataType dtype, int source, size_t index, int salt) {
  return input_value(dtype, ReduceOp::kMax, source, index, salt);
}

void check(const Case& k, int rank, const char* what, DataType dtype, const void* buf, size_t count,
           const std::function<double(size_t)>& expect) {
  Mismatch m = compare(dtype, buf, count, expect);
  EXPECT_EQ(m.count, 0u) << k.describe() << " rank " << rank << " " << what
                         << ": first wrong element " << m.first << " = " << m.got << ", expected "
                         << m.want;
}

}  // namespace

std::string Case::describe() const {
  std::ostringstream os;
  os << to_string(coll) << "[algo=" << algo << " dtype=" << to_string(dtype)
     << " op=" << to_string(op) << " count=" << count << (in_place ? " in-place" : " out-of-place")
     << " root=" << root << (async ? " async" : "") << "]";
  return os.str();
}

// Every registered algorithm of `coll` that runs on one host (the hierarchical ones are tested
// across hosts, tests/comm_ucx).
std::vector<std::string> algorithms_of(Collective coll) {
  std::vector<std::string> names;
  for (const algo::AlgoEntry& e : algo::all_algorithms())
    if (e.coll == coll && algo::runs_on_hosts(e.algo, 1))
      names.emplace_back(algo::to_string(e.algo));
  return names;
}

void run_and_check(Communicator& comm, const Case& k) {
  const int n = comm.size(), r = comm.rank();
  const size_t es = dtype_size(k.dtype), c = k.count;
  comm.set_algorithm(k.algo);
  auto go = [&](auto&& blocking, auto&& async) {
    if (k.async)
      async().wait();
    else
      blocking();
  };
  switch (k.coll) {
    case Collective::kAllReduce: {
      GuardedBuffer in(c * es), out(c * es);
      fill_inputs(k.dtype, k.op, r, in.data(), c, 0, k.salt);
      void* recv = k.in_place ? in.data() : out.data();
      go([&] { comm.all_reduce(in.data(), recv, c, k.dtype, k.op); },
         [&] { return comm.all_reduce_async(in.data(), recv, c, k.dtype, k.op); });
      check(k, r, "recv", k.dtype, recv, c,
            [&](size_t i) { return expected_reduction(k.dtype, k.op, n, i, k.salt); });
      EXPECT_TRUE(in.guards_intact() && out.guards_intact())
          << k.describe() << " wrote out of bounds";
      break;
    }
    case Collective::kReduceScatter: {
      GuardedBuffer in(n * c * es), out(c * es);
      fill_inputs(k.dtype, k.op, r, in.data(), n * c, 0, k.salt);
      void* recv = k.in_place ? in.data() + r * c * es : out.data();
      go([&] { comm.reduce_scatter(in.data(), recv, c, k.dtype, k.op); },
         [&] { return comm.reduce_scatter_async(in.data(), recv, c, k.dtype, k.op); });
      check(k, r, "recv", k.dtype, recv, c,
            [&](size_t i) { return expected_reduction(k.dtype, k.op, n, r * c + i, k.salt); });
      EXPECT_TRUE(in.guards_intact() && out.guards_intact())
          << k.describe() << " wrote out of bounds";
      break;
    }
    case Collective::kAllGather: {
      GuardedBuffer in(c * es), out(n * c * es);
      std::byte* send = k.in_place ? out.data() + r * c * es : in.data();
      for (size_t i = 0; i < c; ++i) store(k.dtype, send, i, payload(k.dtype, r, i, k.salt));
      go([&] { comm.all_gather(send, out.data(), c, k.dtype); },
         [&] { return comm.all_gather_async(send, out.data(), c, k.dtype); });
      check(k, r, "recv", k.dtype, out.data(), n * c, [&](size_t i) {
        return static_cast<double>(payload(k.dtype, static_cast<int>(i / c), i % c, k.salt));
      });
      EXPECT_TRUE(in.guards_intact() && out.guards_intact())
          << k.describe() << " wrote out of bounds";
      break;
    }
    case Collective::kBroadcast: {
      GuardedBuffer in(c * es), out(c * es);
      for (size_t i = 0; i < c; ++i) {
        store(k.dtype, in.data(), i, r == k.root ? payload(k.dtype, k.root, i, k.salt) : 0);
        store(k.dtype, out.data(), i, 1);
      }
      void* recv = k.in_place ? in.data() : out.data();
      go([&] { comm.broadcast(in.data(), recv, c, k.dtype, k.root); },
         [&] { return comm.broadcast_async(in.data(), recv, c, k.dtype, k.root); });
      check(k, r, "recv", k.dtype, recv, c,
            [&](size_t i) { return static_cast<double>(payload(k.dtype, k.root, i, k.salt)); });
      EXPECT_TRUE(in.guards_intact() && out.guards_intact())
          << k.describe() << " wrote out of bounds";
      break;
    }
    case Collective::kReduce: {
      GuardedBuffer in(c * es), out(c * es);
      fill_inputs(k.dtype, k.op, r, in.data(), c, 0, k.salt);
      // Non-roots pass a null recv: it must not be touched.
      void* recv = r != k.root ? nullptr : k.in_place ? in.data() : out.data();
      go([&] { comm.reduce(in.data(), recv, c, k.dtype, k.op, k.root); },
         [&] { return comm.reduce_async(in.data(), recv, c, k.dtype, k.op, k.root); });
      if (r == k.root)
        check(k, r, "recv", k.dtype, recv, c,
              [&](size_t i) { return expected_reduction(k.dtype, k.op, n, i, k.salt); });
      else
        check(k, r, "send (must be unchanged)", k.dtype, in.data(), c, [&](size_t i) {
          return static_cast<double>(input_value(k.dtype, k.op, r, i, k.salt));
        });
      EXPECT_TRUE(in.guards_intact() && out.guards_intact())
          << k.describe() << " wrote out of bounds";
      break;
    }
    case Collective::kGather: {
      GuardedBuffer in(c * es), out(n * c * es);
      std::byte* send = k.in_place && r == k.root ? out.data() + r * c * es : in.data();
      for (size_t i = 0; i < c; ++i) store(k.dtype, send, i, payload(k.dtype, r, i, k.salt));
      void* recv = r == k.root ? out.data() : nullptr;
      go([&] { comm.gather(send, recv, c, k.dtype, k.root); },
         [&] { return comm.gather_async(send, recv, c, k.dtype, k.root); });
      if (r == k.root)
        check(k, r, "recv", k.dtype, out.data(), n * c, [&](size_t i) {
          return static_cast<double>(payload(k.dtype, static_cast<int>(i / c), i % c, k.salt));
        });
      EXPECT_TRUE(in.guards_intact() && out.guards_intact())
          << k.describe() << " wrote out of bounds";
      break;
    }
    case Collective::kScatter: {
      GuardedBuffer in(n * c * es), out(c * es);
      if (r == k.root)
        for (size_t i = 0; i < n * c; ++i)
          store(k.dtype, in.data(), i, payload(k.dtype, static_cast<int>(i / c), i % c, k.salt));
      void* recv = k.in_place && r == k.root ? in.data() + r * c * es : out.data();
      const void* send = r == k.root ? in.data() : nullptr;
      go([&] { comm.scatter(send, recv, c, k.dtype, k.root); },
         [&] { return comm.scatter_async(send, recv, c, k.dtype, k.root); });
      check(k, r, "recv", k.dtype, recv, c,
            [&](size_t i) { return static_cast<double>(payload(k.dtype, r, i, k.salt)); });
      EXPECT_TRUE(in.guards_intact() && out.guards_intact())
          << k.describe() << " wrote out of bounds";
      break;
    }
    case Collective::kAllToAll: {
      GuardedBuffer in(n * c * es), out(n * c * es);
      for (size_t i = 0; i < n * c; ++i)
        store(k.dtype, in.data(), i,
              payload(k.dtype, r * n + static_cast<int>(i / c), i % c, k.salt));
      go([&] { comm.all_to_all(in.data(), out.data(), c, k.dtype); },
         [&] { return comm.all_to_all_async(in.data(), out.data(), c, k.dtype); });
      check(k, r, "recv", k.dtype, out.data(), n * c, [&](size_t i) {
        const int from = static_cast<int>(i / c);
        return static_cast<double>(payload(k.dtype, from * n + r, i % c, k.salt));
      });
      EXPECT_TRUE(in.guards_intact() && out.guards_intact())
          << k.describe() << " wrote out of bounds";
      break;
    }
    default:
      FAIL() << "run_and_check does not handle " << to_string(k.coll);
  }
}

}  // namespace chorus::testing
