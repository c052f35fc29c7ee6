#include "fold_cases.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "algo/algorithm.h"
#include "chorus/kernels/cpu.h"
#include "reference.h"

namespace chorus::testing {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double order_sensitive_value(const FoldCase& k, int rank, size_t i) {
  const uint64_t h =
      mix(mix(static_cast<uint64_t>(k.salt) * 1000003u + static_cast<uint64_t>(rank)) + i);
  const double sign = (h & 1) != 0 ? -1.0 : 1.0;
  if (!is_floating(k.dtype)) {
    if (k.op == ReduceOp::kProd) return static_cast<double>(static_cast<int64_t>(h % 7) - 3);
    return static_cast<double>(static_cast<int64_t>(h % 2001) - 1000);
  }
  if (i % 13 == 5) return sign * 0.0;
  // 52 random bits: f64 sums round too (f32, f16 and bf16 round them when converted).
  const double mantissa = 1.0 + std::ldexp(static_cast<double>(mix(h) >> 12), -52);
  if (k.op == ReduceOp::kProd) return sign * mantissa;
  const int range = k.dtype == DataType::kF16 ? 8 : 16;
  const int exponent = static_cast<int>((h >> 40) % (2 * range + 1)) - range;
  return sign * std::ldexp(mantissa, exponent);
}

size_t input_count(const FoldCase& k, int n) {
  return k.coll == Collective::kReduceScatter ? k.count * static_cast<size_t>(n) : k.count;
}

std::string hex(const std::byte* p, size_t bytes) {
  std::ostringstream os;
  os << "0x" << std::hex;
  for (size_t b = bytes; b-- > 0;)  // little endian: most significant byte last
    os << ((static_cast<unsigned>(p[b]) >> 4) & 0xf) << (static_cast<unsigned>(p[b]) & 0xf);
  return os.str();
}

}  // namespace

std::string FoldCase::describe() const {
  std::ostringstream os;
  os << to_string(coll) << "[dtype=" << to_string(dtype) << " op=" << to_string(op)
     << " count=" << count << (in_place ? " in-place" : " out-of-place") << " root=" << root
     << " salt=" << salt << "]";
  return os.str();
}

void fill_order_sensitive(const FoldCase& k, int rank, void* buf, size_t count) {
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = order_sensitive_value(k, rank, i);
  kernels::cast(k.dtype, buf, DataType::kF64, v.data(), count);
}

std::vector<std::byte> rank_order_fold(const FoldCase& k, int n, size_t count) {
  const size_t bytes = count * dtype_size(k.dtype);
  std::vector<std::byte> acc(bytes), x(bytes);
  fill_order_sensitive(k, 0, acc.data(), count);
  const ReduceOp step = k.op == ReduceOp::kAvg ? ReduceOp::kSum : k.op;
  for (int r = 1; r < n; ++r) {
    fill_order_sensitive(k, r, x.data(), count);
    kernels::reduce(k.dtype, step, acc.data(), acc.data(), x.data(), count);
  }
  if (k.op == ReduceOp::kAvg) kernels::divide(k.dtype, acc.data(), acc.data(), count, n);
  return acc;
}

FoldCheck::FoldCheck(const FoldCase& k, int rank, int n) : k_(k), rank_(rank), n_(n) {
  const size_t total = input_count(k, n), es = dtype_size(k.dtype);
  input_.resize(total * es);
  fill_order_sensitive(k, rank, input_.data(), total);
  if (k.coll == Collective::kReduce && rank != k.root) return;
  const std::vector<std::byte> fold = rank_order_fold(k, n, total);
  const size_t first =
      k.coll == Collective::kReduceScatter ? static_cast<size_t>(rank) * k.count : 0;
  expected_.assign(fold.begin() + static_cast<ptrdiff_t>(first * es),
                   fold.begin() + static_cast<ptrdiff_t>((first + k.count) * es));
}

size_t FoldCheck::differing(Communicator& comm, const std::string& algo, std::string* why,
                            std::string* ran) {
  const size_t es = dtype_size(k_.dtype), c = k_.count, r = static_cast<size_t>(rank_);
  const bool async = k_.salt % 2 == 1;
  comm.set_algorithm(algo);
  GuardedBuffer in(input_.size()), out(c * es);
  if (!input_.empty()) std::memcpy(in.data(), input_.data(), input_.size());
  std::byte* result = nullptr;
  Work work;
  switch (k_.coll) {
    case Collective::kAllReduce:
      result = k_.in_place ? in.data() : out.data();
      if (async)
        work = comm.all_reduce_async(in.data(), result, c, k_.dtype, k_.op);
      else
        comm.all_reduce(in.data(), result, c, k_.dtype, k_.op);
      break;
    case Collective::kReduceScatter:
      result = k_.in_place ? in.data() + r * c * es : out.data();
      if (async)
        work = comm.reduce_scatter_async(in.data(), result, c, k_.dtype, k_.op);
      else
        comm.reduce_scatter(in.data(), result, c, k_.dtype, k_.op);
      break;
    case Collective::kReduce: {
      // Non-roots pass a null recv.
      std::byte* recv = rank_ != k_.root ? nullptr : k_.in_place ? in.data() : out.data();
      if (async)
        work = comm.reduce_async(in.data(), recv, c, k_.dtype, k_.op, k_.root);
      else
        comm.reduce(in.data(), recv, c, k_.dtype, k_.op, k_.root);
      result = recv;
      break;
    }
    default:
      ADD_FAILURE() << "not a reduction: " << k_.describe();
      return 0;
  }
  work.wait();
  comm.set_algorithm("auto");
  if (ran != nullptr) *ran = work.algorithm();
  EXPECT_TRUE(in.guards_intact() && out.guards_intact())
      << k_.describe() << " algo=" << algo << " wrote out of bounds";
  if (result == nullptr) return 0;
  size_t differ = 0;
  for (size_t i = 0; i < c; ++i) {
    if (std::memcmp(result + i * es, expected_.data() + i * es, es) == 0) continue;
    if (differ++ == 0 && why != nullptr)
      *why = detail::concat("element ", i, " is ", hex(result + i * es, es), ", the fold gives ",
                            hex(expected_.data() + i * es, es));
  }
  return differ;
}

void check_against_fold(Communicator& comm, const FoldCase& k,
                        const std::vector<std::string>& algos) {
  FoldCheck check(k, comm.rank(), comm.size());
  for (const std::string& algo : algos) {
    std::string why, ran;
    const size_t differ = check.differing(comm, algo, &why, &ran);
    EXPECT_EQ(differ, 0u) << k.describe() << " algo=" << algo << " rank " << comm.rank() << ": "
                          << differ << " elements differ from the rank-order fold; first: " << why;
    if (comm.deterministic() && !ran.empty()) {
      const auto v = algo::parse_variant(ran);
      EXPECT_TRUE(v && algo::folds_in_rank_order(k.coll, v->algo))
          << k.describe() << " algo=" << algo << " ran " << ran;
    }
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace chorus::testing
