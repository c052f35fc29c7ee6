// chorus — this build's kernel table (see kernels/cpu/dispatch.h).
#include "../dispatch.h"
#include "isa.h"

#define CHORUS_KERNELS_STR2(x) #x
#define CHORUS_KERNELS_STR(x) CHORUS_KERNELS_STR2(x)

namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS {

const IsaKernels kKernels = {
    .name = CHORUS_KERNELS_STR(CHORUS_KERNELS_ISA_NS),
    .reduce = reduce,
    .reduce_n = reduce_n,
    .divide = divide,
    .cast = cast,
    .copy_stream = copy_stream,
    .reduce_stream = reduce_stream,
};

}  // namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS
