// chorus — internal: the per-instruction-set kernel tables and the choice between them.
//
// The sources under kernels/cpu/isa/ are compiled once per instruction set (see
// kernels/CMakeLists.txt), each copy into its own namespace, and each copy exports one IsaKernels
// table. The public functions in chorus/kernels/cpu.h validate their arguments and forward to the
// table chosen at first use. Tests and benchmarks include this header to call every table the CPU
// can run directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/types.h"

namespace chorus::kernels::detail {

// Ordered from the most portable to the widest; a higher value needs every feature of the lower.
enum class Isa : uint8_t {
  kGeneric = 0,  // x86-64 baseline (SSE2); 16-bit floats converted in scalar code
  kAvx2,         // AVX2 + FMA + F16C (Haswell, Zen 1 and later)
  kAvx512,       // AVX-512 F/BW/VL/DQ (Skylake-SP, Zen 4 and later)
};

inline constexpr Isa kAllIsas[] = {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512};

// One instruction set's kernels. Arguments are validated by the caller (dispatch.cc): valid dtype
// and op, n >= 1, divisor != 0, non-null pointers when count > 0. Kernels never throw.
struct IsaKernels {
  // "generic", "avx2" or "avx512", as CHORUS_KERNELS_ISA spells it.
  const char* name;
  // dst[i] = a[i] op b[i]; dst may equal a or b.
  void (*reduce)(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b,
                 size_t count);
  // dst[i] = srcs[0][i] op ... op srcs[n-1][i], folded left; dst may equal any srcs[k].
  void (*reduce_n)(DataType dtype, ReduceOp op, void* dst, const void* const* srcs, int n,
                   size_t count);
  // dst[i] = src[i] / divisor; dst may equal src.
  void (*divide)(DataType dtype, void* dst, const void* src, size_t count, int64_t divisor);
  // dst[i] = dst_type(src[i]); dst may equal src only when both types have the same size.
  void (*cast)(DataType dst_type, void* dst, DataType src_type, const void* src, size_t count);
  // memcpy with non-temporal stores, fenced; dst and src do not overlap.
  void (*copy_stream)(void* dst, const void* src, size_t bytes);
  // reduce with non-temporal stores of dst, fenced, and the same result stored normally to also
  // when it is not null; dst and also overlap nothing.
  void (*reduce_stream)(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b,
                        size_t count, void* also);
};

// The tables, one per namespace that kernels/cpu/isa/ is compiled into.
namespace generic {
extern const IsaKernels kKernels;
}
namespace avx2 {
extern const IsaKernels kKernels;
}
namespace avx512 {
extern const IsaKernels kKernels;
}

const IsaKernels& kernels_for(Isa isa);
std::string_view to_string(Isa isa);
std::optional<Isa> parse_isa(std::string_view name);

// Whether this CPU (and OS, for the wider register state) can run the given table.
bool cpu_supports(Isa isa);
// The widest instruction set this CPU supports.
Isa best_isa();
// Every instruction set this CPU supports, lowest first.
std::vector<Isa> supported_isas();
// The instruction set to use given CHORUS_KERNELS_ISA's value (nullopt: not set) and the CPU's
// best. Throws InvalidArgument for an unknown name or one wider than `best`.
Isa resolve_isa(const std::optional<std::string>& requested, Isa best);

// The table in use, chosen on first call from the CPU and CHORUS_KERNELS_ISA.
const IsaKernels& active_kernels();

}  // namespace chorus::kernels::detail
