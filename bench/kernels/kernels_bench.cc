// chorus-kernels-bench: throughput of the CPU kernels per instruction set, in GB/s of memory
// traffic (bytes read + bytes written), next to memcpy.
//
// Sizes are the bytes of one input buffer: 64 KiB (L1/L2), 1 MiB (L2), 16 MiB (L3) and 256 MiB
// (mostly DRAM). Names read <kernel>/<dtype>/<op>/<isa>/<size>, so a filter such as
// --benchmark_filter='reduce/f32/sum/.*/1MiB' compares the instruction sets.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/kernels/cpu.h"
#include "dispatch.h"

namespace chorus::kernels {
namespace {

using detail::Isa;

constexpr size_t kSizes[] = {size_t{64} << 10, size_t{1} << 20, size_t{16} << 20,
                             size_t{256} << 20};

std::string size_name(size_t bytes) {
  return bytes >= (size_t{1} << 20) ? std::to_string(bytes >> 20) + "MiB"
                                    : std::to_string(bytes >> 10) + "KiB";
}

// A page-faulted buffer whose bytes (0x3c) are normal, moderate numbers in every float type, so
// no kernel runs into denormal slow paths.
std::vector<unsigned char> make_buffer(size_t bytes) {
  return std::vector<unsigned char>(bytes, 0x3c);
}

void report(benchmark::State& state, size_t bytes_per_iteration) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes_per_iteration));
}

void bench_reduce(benchmark::State& state, Isa isa, DataType dtype, ReduceOp op, bool in_place,
                  size_t bytes) {
  const size_t count = bytes / dtype_size(dtype);
  auto a = make_buffer(bytes), b = make_buffer(bytes), out = make_buffer(bytes);
  const auto& k = detail::kernels_for(isa);
  void* dst = in_place ? a.data() : out.data();
  for (auto _ : state) {
    k.reduce(dtype, op, dst, a.data(), b.data(), count);
    benchmark::ClobberMemory();
  }
  report(state, 3 * bytes);
}

// Out of place with the result streamed (reduce_stream): what a collective's large result costs.
void bench_reduce_stream(benchmark::State& state, Isa isa, DataType dtype, size_t bytes) {
  const size_t count = bytes / dtype_size(dtype);
  auto a = make_buffer(bytes), b = make_buffer(bytes), out = make_buffer(bytes);
  const auto& k = detail::kernels_for(isa);
  for (auto _ : state) {
    k.reduce_stream(dtype, ReduceOp::kSum, out.data(), a.data(), b.data(), count, nullptr);
    benchmark::ClobberMemory();
  }
  report(state, 3 * bytes);
}

void bench_reduce_n(benchmark::State& state, Isa isa, DataType dtype, int n, size_t bytes) {
  const size_t count = bytes / dtype_size(dtype);
  std::vector<std::vector<unsigned char>> inputs;
  std::vector<const void*> srcs;
  for (int i = 0; i < n; ++i) inputs.push_back(make_buffer(bytes));
  for (const auto& in : inputs) srcs.push_back(in.data());
  auto out = make_buffer(bytes);
  const auto& k = detail::kernels_for(isa);
  for (auto _ : state) {
    k.reduce_n(dtype, ReduceOp::kSum, out.data(), srcs.data(), n, count);
    benchmark::ClobberMemory();
  }
  report(state, (n + 1) * bytes);
}

void bench_divide(benchmark::State& state, Isa isa, DataType dtype, size_t bytes) {
  const size_t count = bytes / dtype_size(dtype);
  auto src = make_buffer(bytes), out = make_buffer(bytes);
  const auto& k = detail::kernels_for(isa);
  for (auto _ : state) {
    k.divide(dtype, out.data(), src.data(), count, 8);
    benchmark::ClobberMemory();
  }
  report(state, 2 * bytes);
}

void bench_cast(benchmark::State& state, Isa isa, DataType to, DataType from, size_t bytes) {
  const size_t count = bytes / dtype_size(from);
  auto src = make_buffer(bytes), out = make_buffer(count * dtype_size(to));
  const auto& k = detail::kernels_for(isa);
  for (auto _ : state) {
    k.cast(to, out.data(), from, src.data(), count);
    benchmark::ClobberMemory();
  }
  report(state, bytes + count * dtype_size(to));
}

template <void (*kCopy)(void*, const void*, size_t)>
void bench_copy(benchmark::State& state, size_t bytes) {
  auto src = make_buffer(bytes), out = make_buffer(bytes);
  for (auto _ : state) {
    kCopy(out.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  report(state, 2 * bytes);
}

void libc_memcpy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

// The copies a byte costs on its way through the shared-memory FIFO (comm/transport/shm), done
// here by one core: the sender's memcpy from src into a 64 KiB slot of a 512 KiB ring (8 slots,
// the default CHORUS_SHM_SLOT_BYTES and CHORUS_SHM_DEPTH), the receiver's streaming copy from the
// slot to dst, or both in turn. Bytes counted are the traffic outside the slots, which stay in
// cache: src read (into_slots), dst written (out_of_slots), both (through, comparable with
// copy/copy_stream, which count read + written too). On two ranks the two halves run on two
// cores and the slot crosses between them; these are the single-core figures that
// docs/perf/kernels.md derives the bounds of the FIFO collectives from.
enum class FifoSide { kIn, kOut, kThrough };

void bench_fifo(benchmark::State& state, FifoSide side, size_t bytes) {
  constexpr size_t kSlot = 64 << 10, kRing = 8 * kSlot;
  auto src = make_buffer(bytes), out = make_buffer(bytes), ring = make_buffer(kRing);
  for (auto _ : state) {
    for (size_t off = 0; off < bytes; off += kSlot) {
      const size_t n = std::min(kSlot, bytes - off);
      unsigned char* slot = ring.data() + off % kRing;
      if (side != FifoSide::kOut) std::memcpy(slot, src.data() + off, n);
      if (side != FifoSide::kIn) copy_stream(out.data() + off, slot, n);
    }
    benchmark::ClobberMemory();
  }
  report(state, side == FifoSide::kThrough ? 2 * bytes : bytes);
}

std::string dtype_name(DataType t) {
  static const char* kNames[] = {"f32", "f64", "f16", "bf16", "i8", "u8", "i32", "i64"};
  return kNames[static_cast<int>(t)];
}

void register_all() {
  struct ReduceCase {
    DataType dtype;
    ReduceOp op;
  };
  const ReduceCase reduce_cases[] = {
      {DataType::kF32, ReduceOp::kSum}, {DataType::kBF16, ReduceOp::kSum},
      {DataType::kF16, ReduceOp::kSum}, {DataType::kF64, ReduceOp::kSum},
      {DataType::kI32, ReduceOp::kSum}, {DataType::kF32, ReduceOp::kMax}};
  for (size_t bytes : kSizes) {
    const std::string size = "/" + size_name(bytes);
    for (Isa isa : detail::supported_isas()) {
      const std::string is = "/" + std::string(detail::to_string(isa));
      for (const ReduceCase& c : reduce_cases)
        benchmark::RegisterBenchmark(
            ("reduce/" + dtype_name(c.dtype) + "/" + std::string(to_string(c.op)) + is + size)
                .c_str(),
            bench_reduce, isa, c.dtype, c.op, false, bytes);
      benchmark::RegisterBenchmark(("reduce_stream/f32/sum" + is + size).c_str(),
                                   bench_reduce_stream, isa, DataType::kF32, bytes);
      benchmark::RegisterBenchmark(("reduce_stream/bf16/sum" + is + size).c_str(),
                                   bench_reduce_stream, isa, DataType::kBF16, bytes);
      benchmark::RegisterBenchmark(("reduce_inplace/f32/sum" + is + size).c_str(), bench_reduce,
                                   isa, DataType::kF32, ReduceOp::kSum, true, bytes);
      benchmark::RegisterBenchmark(("reduce_inplace/bf16/sum" + is + size).c_str(), bench_reduce,
                                   isa, DataType::kBF16, ReduceOp::kSum, true, bytes);
      benchmark::RegisterBenchmark(("reduce_n4/f32/sum" + is + size).c_str(), bench_reduce_n, isa,
                                   DataType::kF32, 4, bytes);
      benchmark::RegisterBenchmark(("reduce_n4/bf16/sum" + is + size).c_str(), bench_reduce_n, isa,
                                   DataType::kBF16, 4, bytes);
      benchmark::RegisterBenchmark(("divide/f32" + is + size).c_str(), bench_divide, isa,
                                   DataType::kF32, bytes);
      benchmark::RegisterBenchmark(("cast/f32->bf16" + is + size).c_str(), bench_cast, isa,
                                   DataType::kBF16, DataType::kF32, bytes);
    }
    benchmark::RegisterBenchmark(("copy/memcpy" + size).c_str(), bench_copy<libc_memcpy>, bytes);
    benchmark::RegisterBenchmark(("copy/kernels_copy" + size).c_str(), bench_copy<copy>, bytes);
    benchmark::RegisterBenchmark(("copy/copy_stream" + size).c_str(), bench_copy<copy_stream>,
                                 bytes);
    benchmark::RegisterBenchmark(("fifo/into_slots" + size).c_str(), bench_fifo, FifoSide::kIn,
                                 bytes);
    benchmark::RegisterBenchmark(("fifo/out_of_slots" + size).c_str(), bench_fifo, FifoSide::kOut,
                                 bytes);
    benchmark::RegisterBenchmark(("fifo/through" + size).c_str(), bench_fifo, FifoSide::kThrough,
                                 bytes);
  }
}

}  // namespace
}  // namespace chorus::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  chorus::kernels::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
