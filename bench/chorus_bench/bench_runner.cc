#include "bench_runner.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <new>

namespace chorus::bench {
namespace {

constexpr std::align_val_t kAlignment{64};

struct AlignedDelete {
  void operator()(std::byte* p) const { ::operator delete(p, kAlignment); }
};
using AlignedBytes = std::unique_ptr<std::byte[], AlignedDelete>;

AlignedBytes allocate(size_t bytes) {
  return AlignedBytes(
      static_cast<std::byte*>(::operator new(std::max<size_t>(bytes, 1), kAlignment)));
}

std::byte* offset(std::byte* base, size_t elements, DataType dtype) {
  return base + elements * dtype_size(dtype);
}

}  // namespace

BenchRunner::BenchRunner(Communicator& comm, const Options& options, std::FILE* out)
    : comm_(comm), options_(options), out_(out) {}

void BenchRunner::print(const std::string& text) {
  if (comm_.rank() != 0) return;
  std::fputs(text.c_str(), out_);
  std::fflush(out_);
}

double BenchRunner::max_over_ranks(double value) {
  double result = 0;
  comm_.all_reduce(&value, &result, 1, DataType::kF64, ReduceOp::kMax);
  return result;
}

uint64_t BenchRunner::sum_over_ranks(uint64_t value) {
  int64_t local = static_cast<int64_t>(value);
  int64_t result = 0;
  comm_.all_reduce(&local, &result, 1, DataType::kI64, ReduceOp::kSum);
  return static_cast<uint64_t>(result);
}

Work BenchRunner::issue(const CollectiveCase& c, std::byte* send_base, std::byte* recv_base) {
  const CaseParams& p = c.params();
  const DataType dtype = p.dtype;
  std::byte* recv = offset(recv_base, c.recv_offset(), dtype);
  const std::byte* send = c.in_place() ? offset(recv_base, c.send_offset(), dtype) : send_base;
  const int n = p.world_size;
  switch (p.collective) {
    case BenchCollective::kAllReduce:
      return comm_.all_reduce_async(send, recv, p.count, dtype, p.op);
    case BenchCollective::kReduceScatter:
      return comm_.reduce_scatter_async(send, recv, p.count, dtype, p.op);
    case BenchCollective::kAllGather:
      return comm_.all_gather_async(send, recv, p.count, dtype);
    case BenchCollective::kBroadcast:
      return comm_.broadcast_async(send, recv, p.count, dtype, p.root);
    case BenchCollective::kReduce:
      return comm_.reduce_async(send, recv, p.count, dtype, p.op, p.root);
    case BenchCollective::kGather:
      return comm_.gather_async(send, recv, p.count, dtype, p.root);
    case BenchCollective::kScatter:
      return comm_.scatter_async(send, recv, p.count, dtype, p.root);
    case BenchCollective::kAllToAll:
      return comm_.all_to_all_async(send, recv, p.count, dtype);
    case BenchCollective::kSendRecv:
      return comm_.send_recv_async(send, p.count, (p.rank + 1) % n, recv, p.count,
                                   (p.rank + n - 1) % n, dtype);
  }
  return Work();
}

Measurement BenchRunner::measure(const CollectiveCase& c, size_t bytes, std::byte* send,
                                 std::byte* recv) {
  using Clock = std::chrono::steady_clock;
  c.fill(send, recv);
  std::optional<uint64_t> wrong;
  if (options_.check) {
    issue(c, send, recv).wait();
    wrong = sum_over_ranks(c.count_wrong(recv));
  }

  std::vector<Work> works;
  works.reserve(static_cast<size_t>(std::max(options_.warmup, options_.iters)));
  const auto run_block = [&](int iterations) {
    works.clear();
    for (int i = 0; i < iterations; ++i) works.push_back(issue(c, send, recv));
    for (Work& w : works) w.wait();
  };
  run_block(options_.warmup);

  comm_.barrier();
  const auto start = Clock::now();
  run_block(options_.iters);
  const std::chrono::duration<double, std::micro> elapsed = Clock::now() - start;

  const CaseParams& p = c.params();
  Measurement m = make_measurement(p.collective, p.world_size, bytes,
                                   max_over_ranks(elapsed.count() / options_.iters));
  m.wrong = wrong;
  m.algorithm = works.back().algorithm();
  return m;
}

std::vector<Row> BenchRunner::run(BenchCollective collective) {
  const int n = comm_.size();
  const Options& o = options_;
  const std::optional<ReduceOp> op =
      reduces(collective) ? std::optional<ReduceOp>(o.op) : std::nullopt;
  print(format_table_header({collective, n, o.dtype, op, o.iters, o.warmup, o.algorithm}));

  const std::vector<size_t> sizes = size_list(collective, o.sizes, o.dtype, n);
  const auto make_case = [&](size_t bytes, Placement placement) {
    return CollectiveCase({collective, placement, o.dtype, o.op, o.root, comm_.rank(), n,
                           call_count(collective, bytes, o.dtype, n)});
  };

  // One pair of allocations, sized for the largest line, serves every line (like nccl-tests).
  size_t send_elements = 0;
  size_t recv_elements = 0;
  if (!sizes.empty()) {
    for (Placement placement : {Placement::kOutOfPlace, Placement::kInPlace}) {
      if (placement == Placement::kInPlace && !supports_in_place(collective)) continue;
      const CollectiveCase largest = make_case(sizes.back(), placement);
      send_elements = std::max(send_elements, largest.send_elements());
      recv_elements = std::max(recv_elements, largest.recv_elements());
    }
  }
  const size_t element = dtype_size(o.dtype);
  AlignedBytes send = allocate(send_elements * element);
  AlignedBytes recv = allocate(recv_elements * element);

  std::vector<Row> rows;
  for (size_t bytes : sizes) {
    Row row;
    row.collective = collective;
    row.bytes = bytes;
    row.count = call_count(collective, bytes, o.dtype, n);
    row.dtype = o.dtype;
    row.op = op;
    row.root = has_root(collective) ? o.root : -1;
    row.out_of_place =
        measure(make_case(bytes, Placement::kOutOfPlace), bytes, send.get(), recv.get());
    if (supports_in_place(collective))
      row.in_place = measure(make_case(bytes, Placement::kInPlace), bytes, send.get(), recv.get());
    print(format_row(row));
    rows.push_back(std::move(row));
  }
  print(format_footer(rows));
  return rows;
}

}  // namespace chorus::bench
