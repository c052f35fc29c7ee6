#include "bench_runner.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <new>

#include "chorus/selection_bytes.h"

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

Collective to_collective(BenchCollective c) {
  switch (c) {
    case BenchCollective::kAllReduce:
      return Collective::kAllReduce;
    case BenchCollective::kReduceScatter:
      return Collective::kReduceScatter;
    case BenchCollective::kAllGather:
      return Collective::kAllGather;
    case BenchCollective::kBroadcast:
      return Collective::kBroadcast;
    case BenchCollective::kReduce:
      return Collective::kReduce;
    case BenchCollective::kGather:
      return Collective::kGather;
    case BenchCollective::kScatter:
      return Collective::kScatter;
    case BenchCollective::kAllToAll:
      return Collective::kAllToAll;
    case BenchCollective::kSendRecv:
      return Collective::kSendRecv;
  }
  return Collective::kAllReduce;
}

// The size the communicator's selector sees for a line (what algorithm_for and explain take):
// the selector's own rule (chorus/selection_bytes.h) applied to the line's call.
size_t selector_bytes(BenchCollective c, size_t bytes, DataType dtype, int world_size) {
  return selection_bytes(to_collective(c), call_count(c, bytes, dtype, world_size), dtype,
                         world_size);
}

}  // namespace

BenchRunner::BenchRunner(Communicator& comm, const Options& options, std::FILE* out)
    : comm_(comm), options_(options), out_(out) {
  if (options.device) stream_.emplace();
}

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
  // --device: the stream-ordered form of the same call.
#define CHORUS_BENCH_ISSUE(name, ...) \
  return stream_ ? comm_.name##_async(__VA_ARGS__, stream_->get()) : comm_.name##_async(__VA_ARGS__)
  switch (p.collective) {
    case BenchCollective::kAllReduce:
      CHORUS_BENCH_ISSUE(all_reduce, send, recv, p.count, dtype, p.op);
    case BenchCollective::kReduceScatter:
      CHORUS_BENCH_ISSUE(reduce_scatter, send, recv, p.count, dtype, p.op);
    case BenchCollective::kAllGather:
      CHORUS_BENCH_ISSUE(all_gather, send, recv, p.count, dtype);
    case BenchCollective::kBroadcast:
      CHORUS_BENCH_ISSUE(broadcast, send, recv, p.count, dtype, p.root);
    case BenchCollective::kReduce:
      CHORUS_BENCH_ISSUE(reduce, send, recv, p.count, dtype, p.op, p.root);
    case BenchCollective::kGather:
      CHORUS_BENCH_ISSUE(gather, send, recv, p.count, dtype, p.root);
    case BenchCollective::kScatter:
      CHORUS_BENCH_ISSUE(scatter, send, recv, p.count, dtype, p.root);
    case BenchCollective::kAllToAll:
      CHORUS_BENCH_ISSUE(all_to_all, send, recv, p.count, dtype);
    case BenchCollective::kSendRecv:
      CHORUS_BENCH_ISSUE(send_recv, send, p.count, (p.rank + 1) % n, recv, p.count,
                         (p.rank + n - 1) % n, dtype);
  }
#undef CHORUS_BENCH_ISSUE
  return Work();
}

void BenchRunner::call(const CollectiveCase& c, std::byte* send_base, std::byte* recv_base) {
  if (stream_) {
    issue(c, send_base, recv_base).wait();
    return;
  }
  const CaseParams& p = c.params();
  const DataType dtype = p.dtype;
  std::byte* recv = offset(recv_base, c.recv_offset(), dtype);
  const std::byte* send = c.in_place() ? offset(recv_base, c.send_offset(), dtype) : send_base;
  const int n = p.world_size;
  switch (p.collective) {
    case BenchCollective::kAllReduce:
      return comm_.all_reduce(send, recv, p.count, dtype, p.op);
    case BenchCollective::kReduceScatter:
      return comm_.reduce_scatter(send, recv, p.count, dtype, p.op);
    case BenchCollective::kAllGather:
      return comm_.all_gather(send, recv, p.count, dtype);
    case BenchCollective::kBroadcast:
      return comm_.broadcast(send, recv, p.count, dtype, p.root);
    case BenchCollective::kReduce:
      return comm_.reduce(send, recv, p.count, dtype, p.op, p.root);
    case BenchCollective::kGather:
      return comm_.gather(send, recv, p.count, dtype, p.root);
    case BenchCollective::kScatter:
      return comm_.scatter(send, recv, p.count, dtype, p.root);
    case BenchCollective::kAllToAll:
      return comm_.all_to_all(send, recv, p.count, dtype);
    case BenchCollective::kSendRecv:
      return comm_.send_recv(send, p.count, (p.rank + 1) % n, recv, p.count, (p.rank + n - 1) % n,
                             dtype);
  }
}

std::vector<double> BenchRunner::time_each(const CollectiveCase& c, std::byte* send,
                                           std::byte* recv, double* mean_us) {
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> stamps(static_cast<size_t>(options_.iters) + 1);
  comm_.barrier();
  stamps[0] = Clock::now();
  for (int i = 0; i < options_.iters; ++i) {
    call(c, send, recv);
    stamps[static_cast<size_t>(i) + 1] = Clock::now();
  }
  std::vector<double> local(stamps.size() - 1);
  for (size_t i = 0; i < local.size(); ++i)
    local[i] = std::chrono::duration<double, std::micro>(stamps[i + 1] - stamps[i]).count();
  if (mean_us != nullptr) {
    const std::chrono::duration<double, std::micro> total = stamps.back() - stamps.front();
    *mean_us = max_over_ranks(total.count() / options_.iters);
  }
  std::vector<double> slowest(local.size());
  comm_.all_reduce(local.data(), slowest.data(), local.size(), DataType::kF64, ReduceOp::kMax);
  return slowest;
}

void BenchRunner::fill(const CollectiveCase& c, const Buffers& b) {
  c.fill(b.host_send, b.host_recv);
  if (!stream_) return;
  const size_t element = dtype_size(c.params().dtype);
  gpu::memcpy_async(b.send, b.host_send, c.send_elements() * element, *stream_);
  gpu::memcpy_async(b.recv, b.host_recv, c.recv_elements() * element, *stream_);
  gpu::stream_synchronize(*stream_);
}

size_t BenchRunner::count_wrong(const CollectiveCase& c, const Buffers& b) {
  if (stream_) {
    gpu::memcpy_async(b.host_recv, b.recv, c.recv_elements() * dtype_size(c.params().dtype),
                      *stream_);
    gpu::stream_synchronize(*stream_);
  }
  return c.count_wrong(b.host_recv);
}

Measurement BenchRunner::measure(const CollectiveCase& c, size_t bytes, const Buffers& b) {
  using Clock = std::chrono::steady_clock;
  std::byte* send = b.send;
  std::byte* recv = b.recv;
  fill(c, b);
  std::optional<uint64_t> wrong;
  if (options_.check) {
    if (options_.blocking)
      call(c, send, recv);
    else
      issue(c, send, recv).wait();
    wrong = sum_over_ranks(count_wrong(c, b));
  }

  const CaseParams& p = c.params();
  double mean_us = 0;
  std::string algorithm;
  std::vector<double> each_us;  // -I 1: per-iteration times, max over ranks
  // --blocks timed blocks, each running -n calls through `block`: the median block's time per
  // call (each block's: the slowest rank's mean).
  const auto time_blocks = [&](const auto& block) {
    std::vector<double> block_us;
    for (int b = 0; b < options_.blocks; ++b) {
      comm_.barrier();
      const auto start = Clock::now();
      block();
      const std::chrono::duration<double, std::micro> elapsed = Clock::now() - start;
      block_us.push_back(max_over_ranks(elapsed.count() / options_.iters));
    }
    return percentile_median(block_us);
  };
  if (options_.blocking) {
    for (int i = 0; i < options_.warmup; ++i) call(c, send, recv);
    if (options_.percentiles) {
      // The same timed loop, with a clock read after every call.
      each_us = time_each(c, send, recv, &mean_us);
    } else {
      mean_us = time_blocks([&] {
        for (int i = 0; i < options_.iters; ++i) call(c, send, recv);
      });
    }
    algorithm =
        comm_.algorithm_for(to_collective(p.collective),
                            selector_bytes(p.collective, bytes, p.dtype, p.world_size), memory());
  } else {
    std::vector<Work> works;
    works.reserve(static_cast<size_t>(std::max(options_.warmup, options_.iters)));
    const auto run_block = [&](int iterations) {
      works.clear();
      for (int i = 0; i < iterations; ++i) works.push_back(issue(c, send, recv));
      for (Work& w : works) w.wait();
    };
    run_block(options_.warmup);
    mean_us = time_blocks([&] { run_block(options_.iters); });
    algorithm = works.back().algorithm();
    // Percentiles need each call on its own: a second, blocking pass.
    if (options_.percentiles) each_us = time_each(c, send, recv, nullptr);
  }

  Measurement m = make_measurement(p.collective, p.world_size, bytes, mean_us);
  m.wrong = wrong;
  m.algorithm = std::move(algorithm);
  if (options_.percentiles) {
    m.p50_us = percentile_median(each_us);
    m.p99_us = percentile_99(each_us);
  }
  return m;
}

std::vector<Estimate> BenchRunner::estimates(BenchCollective collective, size_t bytes) const {
  std::vector<Estimate> out;
  const int n = comm_.size();
  for (const AlgorithmEstimate& e :
       comm_.explain(to_collective(collective),
                     selector_bytes(collective, bytes, options_.dtype, n), memory()))
    out.push_back({e.algorithm, e.predicted_us, e.chosen});
  return out;
}

Row BenchRunner::measure_row(BenchCollective collective, size_t bytes, const Buffers& b) {
  const int n = comm_.size();
  const Options& o = options_;
  const auto make_case = [&](Placement placement) {
    return CollectiveCase({collective, placement, o.dtype, o.op, o.root, comm_.rank(), n,
                           call_count(collective, bytes, o.dtype, n)});
  };
  Row row;
  row.collective = collective;
  row.bytes = bytes;
  row.count = call_count(collective, bytes, o.dtype, n);
  row.dtype = o.dtype;
  row.op = reduces(collective) ? std::optional<ReduceOp>(o.op) : std::nullopt;
  row.root = has_root(collective) ? o.root : -1;
  row.out_of_place = measure(make_case(Placement::kOutOfPlace), bytes, b);
  if (supports_in_place(collective))
    row.in_place = measure(make_case(Placement::kInPlace), bytes, b);
  if (o.explain) {
    row.estimates = estimates(collective, bytes);
    row.predicted_us = -1;
    for (const Estimate& e : row.estimates)
      if (e.algorithm == row.out_of_place.algorithm) row.predicted_us = e.predicted_us;
  }
  return row;
}

std::vector<Row> BenchRunner::run(BenchCollective collective) {
  const int n = comm_.size();
  const Options& o = options_;
  const std::optional<ReduceOp> op =
      reduces(collective) ? std::optional<ReduceOp>(o.op) : std::nullopt;
  const TableInfo info{collective,    n,
                       o.dtype,       op,
                       o.iters,       o.warmup,
                       o.algorithm,   o.blocking,
                       o.percentiles, o.explain,
                       o.sweep_algos, o.device,
                       o.blocks,      o.register_memory};
  print(format_table_header(info));

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
  gpu::DeviceBuffer device_send, device_recv;
  Buffers buffers{send.get(), recv.get(), send.get(), recv.get()};
  if (o.device) {
    device_send = gpu::DeviceBuffer(std::max<size_t>(send_elements * element, 1));
    device_recv = gpu::DeviceBuffer(std::max<size_t>(recv_elements * element, 1));
    buffers.send = static_cast<std::byte*>(device_send.data());
    buffers.recv = static_cast<std::byte*>(device_recv.data());
    if (o.register_memory) {
      comm_.register_device_memory(device_send.data(), device_send.bytes());
      comm_.register_device_memory(device_recv.data(), device_recv.bytes());
    }
  }
  // Deregistered (collectively) before the buffers are freed, however this function ends.
  struct Deregister {
    Communicator& comm;
    const void* send;
    const void* recv;
    ~Deregister() {
      if (send == nullptr) return;
      try {
        comm.deregister_device_memory(send);
        comm.deregister_device_memory(recv);
      } catch (...) {
        // The communicator broke; the buffers outlive it only if freed after it (see docs).
      }
    }
  } deregister{comm_, o.register_memory ? device_send.data() : nullptr, device_recv.data()};

  std::vector<Row> rows;
  const auto emit = [&](Row row) {
    print(format_row(row, info));
    rows.push_back(std::move(row));
  };
  for (size_t bytes : sizes) {
    if (!o.sweep_algos) {
      emit(measure_row(collective, bytes, buffers));
      continue;
    }
    // Every rank forces the same algorithms in the same order: the list is the registry's.
    comm_.set_algorithm("auto");
    const std::vector<Estimate> all = estimates(collective, bytes);
    for (const Estimate& e : all) {
      comm_.set_algorithm(e.algorithm);
      Row row = measure_row(collective, bytes, buffers);
      row.forced = e.algorithm;
      row.selected = e.chosen;
      if (o.explain) row.predicted_us = e.predicted_us;
      emit(std::move(row));
    }
    comm_.set_algorithm("auto");
    Row row = measure_row(collective, bytes, buffers);
    row.forced = "auto";
    row.selected = true;
    emit(std::move(row));
  }
  print(format_footer(rows));
  return rows;
}

}  // namespace chorus::bench
