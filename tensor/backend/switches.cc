// The process-wide switches backends read (backend/backend.h: allocation poisoning; gemm.h:
// TF32 for GPU GEMMs; ops.h: fused attention).
#include <atomic>

#include "backend/backend.h"
#include "chorus/config.h"
#include "chorus/tensor/gemm.h"
#include "chorus/tensor/ops.h"

namespace chorus::tensor {
namespace {

const IntKnob kPoisonKnob{"CHORUS_TENSOR_POISON", 0,
                          "1: fill every new tensor allocation with 0xFF bytes (NaN), so that "
                          "output a kernel leaves unwritten shows (tests, debugging)"};
const IntKnob kTf32Knob{"CHORUS_TENSOR_TF32", 0,
                        "1: f32 GEMMs on a GPU may round their inputs to TF32 (tensor cores; "
                        "about 1e-3 relative instead of 1e-6)"};
const IntKnob kFusedAttentionKnob{"CHORUS_TENSOR_FUSED_ATTENTION", 1,
                                  "0: causal attention keeps its (B, NH, T, T) weights on every "
                                  "device instead of a device's fused (flash) kernels"};

std::atomic<bool>& poison() {
  static std::atomic<bool> on{kPoisonKnob.get() != 0};
  return on;
}
std::atomic<bool>& tf32() {
  static std::atomic<bool> on{kTf32Knob.get() != 0};
  return on;
}

std::atomic<bool>& fused() {
  static std::atomic<bool> on{kFusedAttentionKnob.get() != 0};
  return on;
}

}  // namespace

bool poison_allocations() { return poison().load(std::memory_order_relaxed); }
void set_poison_allocations(bool on) { poison().store(on, std::memory_order_relaxed); }

bool allow_tf32() { return tf32().load(std::memory_order_relaxed); }
void set_allow_tf32(bool allow) { tf32().store(allow, std::memory_order_relaxed); }

bool fused_attention() { return fused().load(std::memory_order_relaxed); }
void set_fused_attention(bool on) { fused().store(on, std::memory_order_relaxed); }

}  // namespace chorus::tensor
