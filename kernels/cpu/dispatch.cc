// chorus — choosing the kernel table for this CPU, and the public entry points that validate their
// arguments before forwarding to it.
#include "dispatch.h"

#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/kernels/cpu.h"
#include "chorus/log.h"

namespace chorus::kernels {
namespace detail {
namespace {

const StringKnob kIsaKnob{"CHORUS_KERNELS_ISA", "",
                          "force the CPU kernels to a lower instruction set: generic|avx2|avx512"};

}  // namespace

const IsaKernels& kernels_for(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512::kKernels;
    case Isa::kAvx2:
      return avx2::kKernels;
    case Isa::kGeneric:
      break;
  }
  return generic::kKernels;
}

std::string_view to_string(Isa isa) { return kernels_for(isa).name; }

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa isa : kAllIsas)
    if (name == to_string(isa)) return isa;
  return std::nullopt;
}

bool cpu_supports(Isa isa) {
  // __builtin_cpu_supports also checks that the OS saves the wide register state (XCR0). The
  // explicit init makes it valid even when called from a static constructor.
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kGeneric:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::kAvx512:
      return cpu_supports(Isa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
  }
  return false;
}

Isa best_isa() {
  Isa best = Isa::kGeneric;
  for (Isa isa : kAllIsas)
    if (cpu_supports(isa)) best = isa;
  return best;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : kAllIsas)
    if (cpu_supports(isa)) out.push_back(isa);
  return out;
}

Isa resolve_isa(const std::optional<std::string>& requested, Isa best) {
  if (!requested) return best;
  const std::optional<Isa> isa = parse_isa(*requested);
  CHORUS_ARG_CHECK(isa.has_value(), kIsaKnob.name(), "='", *requested,
                   "' is not one of generic, avx2, avx512");
  CHORUS_ARG_CHECK(*isa <= best, kIsaKnob.name(), "='", *requested,
                   "' but this CPU supports at most ", to_string(best));
  return *isa;
}

const IsaKernels& active_kernels() {
  // Thread-safe one-time choice; if the knob is malformed the exception reaches the first caller
  // and the choice is retried on the next call.
  static const IsaKernels& chosen = []() -> const IsaKernels& {
    const Isa best = best_isa();
    const Isa isa = resolve_isa(kIsaKnob.get_if_set(), best);
    CHORUS_INFO(kLogInit, "CPU kernels: ", to_string(isa), " (best on this CPU: ", to_string(best),
                ")");
    return kernels_for(isa);
  }();
  return chosen;
}

}  // namespace detail

namespace {

void check_dtype(DataType dtype) {
  CHORUS_ARG_CHECK(is_valid(dtype), "invalid DataType ", static_cast<int>(dtype));
}

void check_op(ReduceOp op) {
  CHORUS_ARG_CHECK(is_valid(op), "invalid ReduceOp ", static_cast<int>(op));
}

}  // namespace

void reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  check_dtype(dtype);
  check_op(op);
  if (count == 0) return;
  CHORUS_ARG_CHECK(dst && a && b, "reduce: null pointer with count ", count);
  detail::active_kernels().reduce(dtype, op, dst, a, b, count);
}

void reduce_n(DataType dtype, ReduceOp op, void* dst, const void* const* srcs, int n,
              size_t count) {
  check_dtype(dtype);
  check_op(op);
  CHORUS_ARG_CHECK(n >= 1, "reduce_n: n must be >= 1, got ", n);
  if (count == 0) return;
  CHORUS_ARG_CHECK(dst && srcs, "reduce_n: null pointer with count ", count);
  for (int k = 0; k < n; ++k)
    CHORUS_ARG_CHECK(srcs[k] != nullptr, "reduce_n: srcs[", k, "] is null with count ", count);
  detail::active_kernels().reduce_n(dtype, op, dst, srcs, n, count);
}

void divide(DataType dtype, void* dst, const void* src, size_t count, int64_t divisor) {
  check_dtype(dtype);
  CHORUS_ARG_CHECK(divisor != 0, "divide: divisor is 0");
  if (count == 0) return;
  CHORUS_ARG_CHECK(dst && src, "divide: null pointer with count ", count);
  detail::active_kernels().divide(dtype, dst, src, count, divisor);
}

void cast(DataType dst_type, void* dst, DataType src_type, const void* src, size_t count) {
  check_dtype(dst_type);
  check_dtype(src_type);
  if (count == 0) return;
  CHORUS_ARG_CHECK(dst && src, "cast: null pointer with count ", count);
  detail::active_kernels().cast(dst_type, dst, src_type, src, count);
}

void copy_stream(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CHORUS_ARG_CHECK(dst && src, "copy_stream: null pointer with ", bytes, " bytes");
  const auto d = reinterpret_cast<uintptr_t>(dst);
  const auto s = reinterpret_cast<uintptr_t>(src);
  CHORUS_ARG_CHECK(!(d < s + bytes && s < d + bytes), "copy_stream: the ranges overlap");
  detail::active_kernels().copy_stream(dst, src, bytes);
}

void reduce_stream(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b,
                   size_t count, void* also) {
  check_dtype(dtype);
  check_op(op);
  if (count == 0) return;
  CHORUS_ARG_CHECK(dst && a && b, "reduce_stream: null pointer with count ", count);
  const size_t bytes = count * dtype_size(dtype);
  const auto overlap = [bytes](const void* p, const void* q) {
    const auto x = reinterpret_cast<uintptr_t>(p), y = reinterpret_cast<uintptr_t>(q);
    return x < y + bytes && y < x + bytes;
  };
  CHORUS_ARG_CHECK(!overlap(dst, a) && !overlap(dst, b),
                   "reduce_stream: dst overlaps an input (use reduce for in-place calls)");
  CHORUS_ARG_CHECK(
      also == nullptr || (!overlap(also, a) && !overlap(also, b) && !overlap(also, dst)),
      "reduce_stream: `also` overlaps dst or an input");
  detail::active_kernels().reduce_stream(dtype, op, dst, a, b, count, also);
}

const char* isa_name() { return detail::active_kernels().name; }

}  // namespace chorus::kernels
