// Internal: ranks that must compute alike use the same kernels.
#pragma once

#include "chorus/communicator.h"

namespace chorus::parallel {

// Collective over `group`: every rank uses rank 0's GEMM backends (f32 and autocast bf16), which
// rank 0 measures on first use unless a knob forces them. On a deterministic communicator the
// choice is pinned by rule instead of timed (tensor::pin_gemm_choices), so a repeated run makes
// the same choice too. Without this, two ranks timing on a busy machine can pick different
// backends and differ in the last bit.
void agree_on_kernels(Communicator& group);

}  // namespace chorus::parallel
